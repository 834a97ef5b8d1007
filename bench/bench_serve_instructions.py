"""Instructions a typical job costs `serve`, end to end, counted by valgrind.

`serve` runs under `valgrind --tool=callgrind` with counting off; once it consumes and
has answered `--warm` jobs, counting is switched on (`callgrind_control`), `--jobs`
typical ReAct jobs go through RabbitMQ, and counting is switched off again. Everything
the process does for those jobs is counted: the frames, the render, the reply, the
acknowledgement, logging, metrics, the garbage collector and, with tracing on, its
export thread. The broker's and this process's work is not.

The count is shown twice: whole, and without `memcpy`, which valgrind counts by the
byte (`rep movsb`), so that copying a 21 KB body weighs as much as thousands of
instructions. Instructions are not time (cache misses are not in them), but they are
the same on every run, where timed drains on this VM differ by 10-20%.

    .venv/bin/python bench/bench_serve_instructions.py                 # on, 10pct, 1pct, off
    .venv/bin/python bench/bench_serve_instructions.py --values on,off --jobs 2000

Each variant takes a minute or two. Needs valgrind and RabbitMQ.
"""

import argparse
import asyncio
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aio_pika
import orjson

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import bench_side_by_side as side_by_side  # noqa: E402
from bench_e2e import CONFIG, JOB, Drain, serve_env  # noqa: E402

# callgrind_annotate's lines: "1,234 (12.3%)  file:function [object]".
ANNOTATED = re.compile(r"^\s*([\d,]+) \([ \d.]+%\)\s+(\S.*)$")


def counts(out: Path) -> tuple[int, int]:
    """The instructions counted, and those without memcpy."""
    text = subprocess.run(
        ["callgrind_annotate", "--threshold=100", str(out)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    total = copying = 0
    for line in text.splitlines():
        match = ANNOTATED.match(line)
        if match is None or "PROGRAM TOTALS" in line:
            continue
        count = int(match.group(1).replace(",", ""))
        total += count
        if "memcpy" in match.group(2) or "memmove" in match.group(2):
            copying += count
    return total, total - copying


def start_serve(env: dict[str, str], out: Path, log: Path) -> subprocess.Popen[bytes]:
    """`serve` under callgrind, counting nothing until told."""
    command = ["valgrind", "--tool=callgrind", "--instr-atstart=no"]
    with log.open("wb") as sink:
        return subprocess.Popen(
            [*command, f"--callgrind-out-file={out}", sys.executable, "-m", "worker", "serve"],
            cwd=REPO,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )


def count_instructions(pid: int, switch: str) -> None:
    subprocess.run(["callgrind_control", "-i", switch, str(pid)], check=True, capture_output=True)


async def drain(channel: aio_pika.abc.AbstractChannel, queue: str, body: bytes, n: int) -> None:
    meter = Drain(n)
    await meter.fill(channel, queue, body)
    await meter.done.wait()


async def measure(value: str, args: argparse.Namespace, body: bytes, tmp: Path) -> tuple[int, int]:
    """(instructions, without memcpy) a job, with tracing `value`."""
    out, log = tmp / f"{value}.callgrind", tmp / f"{value}.log"
    async with await aio_pika.connect(args.amqp_url) as connection:
        channel = await connection.channel()
        topo = await side_by_side.fresh_topology(channel)
        env = {
            **serve_env(topo, args.amqp_url, 64, CONFIG),
            **side_by_side.setting_env("tracing", value, topo),
            # Under valgrind `serve` runs some 50 times slower: exports the queue's timer
            # sends (each ~1 ms of CPU whatever it carries) would come 50 times as often
            # a job as in real time. Only full batches of 512 spans are exported, as on a
            # busy worker; the spans of the last, partial batch are not counted.
            "OTEL_BSP_SCHEDULE_DELAY": "3600000",
        }
        process = start_serve(env, out, log)
        try:
            deadline = time.monotonic() + 600
            while not side_by_side.consuming(log):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"serve did not start: see {log}")
                await asyncio.sleep(0.5)
            await drain(channel, topo.request_queue, body, args.warm)
            await asyncio.to_thread(count_instructions, process.pid, "on")
            await drain(channel, topo.request_queue, body, args.jobs)
            await asyncio.to_thread(count_instructions, process.pid, "off")
        finally:
            process.terminate()
            process.wait(timeout=120)
            await side_by_side.remove(channel, topo)
    total, without_copies = counts(out)
    return total // args.jobs, without_copies // args.jobs


async def main(args: argparse.Namespace) -> None:
    body = orjson.dumps(orjson.loads(JOB.read_bytes()))
    sink = await side_by_side.start_trace_sink()
    rows = {}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-serve-instr-") as tmp:
            for value in args.values:
                rows[value] = await measure(value, args, body, Path(tmp))
                print(
                    f"  tracing {value}: {rows[value][0]:,} a job ({rows[value][1]:,} without memcpy)",
                    flush=True,
                )
    finally:
        await sink.cleanup()
    base = rows.get("off")
    print("\n| tracing | instructions a job | without memcpy | against off |\n|---|---|---|---|")
    for value, (total, without_copies) in rows.items():
        against = f"{without_copies / base[1]:.3f}×" if base else ""
        print(f"| {value} | {total:,} | {without_copies:,} | {against} |")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--amqp-url", default="amqp://guest:guest@127.0.0.1:5672/")
    parser.add_argument(
        "--values",
        type=lambda text: tuple(text.split(",")),
        default=("on", "10pct", "1pct", "off"),
        help=f"tracing variants, of {', '.join(side_by_side.TRACING)}",
    )
    parser.add_argument("--warm", type=int, default=200, help="jobs before counting starts")
    parser.add_argument("--jobs", type=int, default=1000, help="jobs counted")
    args = parser.parse_args()
    if not set(args.values) <= set(side_by_side.TRACING):
        parser.error(f"--values takes {', '.join(side_by_side.TRACING)}")
    return args


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
