"""How long a big job stalls the worker's event loop: inline, in a thread, in a process.

A ticker task sleeps 1 ms in a loop and records how late it wakes up while one job of
a given size renders (a) inline on the loop, (b) in a thread (`asyncio.to_thread`),
(c) in the worker's render helper process (`worker.offload.RenderPool`). The worst
lateness is how long heartbeats, acks and every other delivery wait behind that job.
The job is the typical ReAct job with its alert data grown to the size asked.

    .venv/bin/python bench/bench_event_loop.py                # 0.1 .. 30 MB
    .venv/bin/python bench/bench_event_loop.py --sizes 1,4,16
"""

import argparse
import asyncio
import sys
import time
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from worker.render.config import load_config  # noqa: E402
from worker.render.renderer import Renderer  # noqa: E402
from worker.render.replies import RenderOutcome  # noqa: E402
from worker.transport.processes.offload import RenderPool  # noqa: E402

JOB = REPO / "tests" / "bench_jobs" / "typical_react_job.json"
CONFIG = REPO / "tests" / "bench_jobs" / "worker.yaml"
LINE = "2026-05-01T10:00:{n:02d}Z pod api-{n} in namespace prod: CrashLoopBackOff, restarts={n}\n"


def job_of_size(megabytes: float) -> bytes:
    job = orjson.loads(JOB.read_bytes())
    target = int(megabytes * 1_000_000)
    text = "".join(LINE.format(n=i % 60) for i in range(target // len(LINE.format(n=10)) + 1))
    job["session"]["alert_data"] = text[:target]
    return orjson.dumps(job)


async def ticker(stop: asyncio.Event, lags: list[float]) -> None:
    while not stop.is_set():
        before = time.perf_counter()
        await asyncio.sleep(0.001)
        lags.append(time.perf_counter() - before - 0.001)


async def trial(
    mode: str, body: bytes, renderer: Renderer, pool: RenderPool
) -> tuple[float, float, str]:
    stop = asyncio.Event()
    lags: list[float] = []
    tick = asyncio.create_task(ticker(stop, lags))
    await asyncio.sleep(0.05)
    started = time.perf_counter()
    outcome: RenderOutcome
    if mode == "inline":
        outcome = renderer.render(body)
    elif mode == "thread":
        outcome = await asyncio.to_thread(renderer.render, body)
    else:
        outcome, _ = await pool.render(body)
    wall = time.perf_counter() - started
    await asyncio.sleep(0.02)
    stop.set()
    await tick
    return wall, max(lags), outcome.status


async def main(sizes: list[float], repeat: int) -> None:
    config = load_config(CONFIG)
    renderer = Renderer(config)
    pool = RenderPool(config, renderer.max_message_bytes)
    await pool.warm_up()
    print("| job MB | mode | render wall ms | worst loop stall ms |")
    print("|---|---|---|---|")
    try:
        for size in sizes:
            body = job_of_size(size)
            for mode in ("inline", "thread", "process"):
                runs = [await trial(mode, body, renderer, pool) for _ in range(repeat)]
                wall = min(r[0] for r in runs)
                stall = min(r[1] for r in runs)
                status = runs[0][2]
                note = "" if status == "ok" else f" ({status})"
                print(
                    f"| {len(body) / 1e6:.1f} | {mode} | {wall * 1000:.1f} | {stall * 1000:.1f}{note} |"
                )
    finally:
        pool.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="0.1,0.5,1,2,4,16,30", help="MB, comma-separated")
    parser.add_argument("--repeat", type=int, default=3, help="best of N")
    args = parser.parse_args()
    asyncio.run(main([float(s) for s in args.sizes.split(",")], args.repeat))
