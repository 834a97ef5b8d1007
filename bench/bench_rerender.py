"""Throughput and memory of `prompt-worker rerender`, end to end (real subprocesses).

    .venv/bin/python bench/bench_rerender.py                    # everything (long)
    .venv/bin/python bench/bench_rerender.py --only local       # 1 vs 2 local workers
    .venv/bin/python bench/bench_rerender.py --only broker      # through 2 `serve` processes
    .venv/bin/python bench/bench_rerender.py --only broker --plain-client --repeat 3
    .venv/bin/python bench/bench_rerender.py --only memory      # peak RSS on 1,000,000 lines

* local / broker: `--jobs` (100,000) copies of tests/bench_jobs/typical_react_job.json
  with varied job ids, rendered with tests/bench_jobs/worker.yaml. Local runs once with
  `--workers 1` (the single-core rate) and once with `--workers 2`; broker runs against
  two `prompt-worker serve` processes on uniquely named queues (deleted afterwards).
* memory: `--memory-lines` (1,000,000) lines cycling through the conformance files
  (wrapped jobs with expected messages, so drift and diffs are exercised), local engine
  with 2 workers. Peak memory is sampled every 0.1 s over the whole process tree: the sum
  of RSS (counts pages shared by the forked workers once per process, so it overstates)
  and the sum of PSS (shares them out).

Rates are jobs per second of the rerender run itself (`this_run.jobs_per_s` of its
report: input read to output written, start-up excluded); CPU is user + system of the
whole process tree. Inputs and outputs go to `--workdir` (default /tmp/bench-rerender);
outputs are deleted after each run. Results: a table, and JSON with --json.
"""

import argparse
import asyncio
import contextlib
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BENCH_JOBS = REPO / "tests" / "bench_jobs"
CONFORMANCE = REPO / "tests" / "conformance"
CONFIG = BENCH_JOBS / "worker.yaml"
PYTHON = sys.executable
AMQP_URL = os.environ.get("PROMPT_WORKER_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")


@dataclass
class Result:
    name: str
    lines: int
    wall_s: float
    jobs_per_s: float
    cpu_s: float
    peak_rss_mb: float
    peak_pss_mb: float
    exit_code: int


# -- inputs --------------------------------------------------------------------------


def typical_jobs(workdir: Path, count: int) -> Path:
    path = workdir / f"typical-react-{count}.jsonl"
    if path.exists():
        return path
    job = json.loads((BENCH_JOBS / "typical_react_job.json").read_text())
    head, tail = "{", json.dumps({k: v for k, v in job.items() if k != "job_id"})[1:]
    tmp = path.with_suffix(".tmp")
    with tmp.open("w") as out:
        for index in range(count):
            out.write(f'{head}"job_id": "bench-{index}", {tail}\n')
    tmp.rename(path)
    return path


def conformance_cycle(workdir: Path, count: int) -> Path:
    path = workdir / f"conformance-cycle-{count}.jsonl"
    if path.exists():
        return path
    lines = []
    for name in ("cases.jsonl", "families.jsonl"):
        lines += [line for line in (CONFORMANCE / name).read_text().splitlines() if line]
    tmp = path.with_suffix(".tmp")
    with tmp.open("w") as out:
        for index in range(count):
            out.write(lines[index % len(lines)] + "\n")
    tmp.rename(path)
    return path


# -- measuring -----------------------------------------------------------------------


def _tree(pid: int) -> list[int]:
    pids, stack = [], [pid]
    while stack:
        current = stack.pop()
        pids.append(current)
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as handle:
                    stack += [int(child) for child in handle.read().split()]
        except OSError:
            continue
    return pids


def _memory_kb(pid: int) -> tuple[int, int]:
    rss = pss = 0
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            for line in handle:
                if line.startswith("Pss:"):
                    pss = int(line.split()[1])
    except OSError:
        pass
    return rss, pss


def run_rerender(
    name: str, source: Path, lines: int, *args: str, env: dict[str, str] | None = None
) -> Result:
    out = source.parent / f"{name}.out.jsonl"
    report = source.parent / f"{name}.report.json"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    command = [PYTHON, "-m", "worker", "rerender", str(source), "--out", str(out),
               "--report", str(report), "--progress", "off", *args]  # fmt: skip
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, env=env)
    peak_rss = peak_pss = 0
    while process.poll() is None:
        totals = [_memory_kb(pid) for pid in _tree(process.pid)]
        peak_rss = max(peak_rss, sum(rss for rss, _ in totals))
        peak_pss = max(peak_pss, sum(pss for _, pss in totals))
        time.sleep(0.1)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    summary = json.loads(report.read_text()) if report.exists() else {}
    rate = (summary.get("this_run") or {}).get("jobs_per_s") or 0.0
    for path in (out, report):
        path.unlink(missing_ok=True)
    return Result(
        name, lines, round(wall, 1), rate, round(cpu, 1),
        round(peak_rss / 1024, 1), round(peak_pss / 1024, 1), process.returncode,
    )  # fmt: skip


# -- broker --------------------------------------------------------------------------


async def _queue_consumers(queue: str) -> int:
    import aio_pika

    connection = await aio_pika.connect(AMQP_URL)
    async with connection:
        channel = await connection.channel()
        try:
            declared = await channel.declare_queue(queue, passive=True)
        except aio_pika.exceptions.ChannelNotFoundEntity:
            return 0
        return int(declared.declaration_result.consumer_count or 0)


async def _delete(names: list[str]) -> None:
    import aio_pika

    connection = await aio_pika.connect(AMQP_URL)
    async with connection:
        for name in names:
            channel = await connection.channel()
            with contextlib.suppress(Exception):
                await channel.queue_delete(name)
        channel = await connection.channel()
        await channel.exchange_delete(names[-1])


# The client on asyncio's own loop instead of serve's (the fleet unchanged).
PLAIN_CLIENT = {"PROMPT_WORKER_EVENT_LOOP": "asyncio"}


@contextlib.contextmanager
def serve_fleet(workers: int, prefix: str = "bench-rerender") -> Iterator[str]:
    """`workers` serve processes (recording off) on queues of their own, consuming;
    yields the request queue. Stopped and the queues deleted afterwards."""
    prefix = f"{prefix}-{uuid.uuid4().hex[:8]}"
    queues = [prefix, f"{prefix}.replies", f"{prefix}.dead"]
    env = {
        **os.environ,
        "PROMPT_WORKER_AMQP_URL": AMQP_URL,
        "PROMPT_WORKER_REQUEST_QUEUE": queues[0],
        "PROMPT_WORKER_REPLY_QUEUE": queues[1],
        "PROMPT_WORKER_DEAD_LETTER_QUEUE": queues[2],
        "PROMPT_WORKER_HTTP_PORT": "0",
        "PROMPT_WORKER_LOG_LEVEL": "warning",
        "PROMPT_WORKER_CONFIG": str(CONFIG),
        "PROMPT_WORKER_ARCHIVE_STREAM": "",  # not what is measured (docs/ARCHIVE.md)
    }
    serves = [
        subprocess.Popen([PYTHON, "-m", "worker", "serve"], cwd=REPO, env=env)
        for _ in range(workers)
    ]
    try:
        deadline = time.monotonic() + 120
        while asyncio.run(_queue_consumers(queues[0])) < workers:
            if time.monotonic() > deadline or any(s.poll() is not None for s in serves):
                raise SystemExit("the serve processes did not start")
            time.sleep(0.5)
        yield queues[0]
    finally:
        for serve in serves:
            serve.send_signal(signal.SIGTERM)
        for serve in serves:
            serve.wait(timeout=60)
        asyncio.run(_delete(queues))


def run_broker(
    source: Path, lines: int, workers: int, window: int, plain_client: bool = False
) -> Result:
    with serve_fleet(workers) as request_queue:
        return run_rerender(
            f"broker-{workers}-serve" + ("-plain" if plain_client else ""), source, lines,
            f"--broker={AMQP_URL}", "--request-queue", request_queue, "--window", str(window),
            env={**os.environ, **PLAIN_CLIENT} if plain_client else None,
        )  # fmt: skip


# -- main ----------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("local", "broker", "memory"), action="append")
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--memory-lines", type=int, default=1_000_000)
    parser.add_argument("--window", type=int, default=256)
    parser.add_argument(
        "--repeat", type=int, default=1, help="local runs per setting (best and median shown)"
    )
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench-rerender"))
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--plain-client",
        action="store_true",
        help="broker: also run the client on asyncio's loop and pamqp's codec, alternating",
    )
    args = parser.parse_args()
    only = set(args.only or ("local", "broker", "memory"))
    args.workdir.mkdir(parents=True, exist_ok=True)
    results: list[Result] = []

    def record(result: Result) -> None:
        results.append(result)
        print(json.dumps(asdict(result)), file=sys.stderr, flush=True)

    config = ("--config", str(CONFIG))
    if only & {"local", "broker"}:
        source = typical_jobs(args.workdir, args.jobs)
    if "local" in only:
        # Interleaved, so a burst of load from elsewhere hits both settings alike.
        for _ in range(args.repeat):
            for workers in (1, 2):
                record(run_rerender(f"local-{workers}", source, args.jobs, *config,
                                    "--workers", str(workers)))  # fmt: skip
    if "broker" in only:
        for round_ in range(args.repeat if args.plain_client else 1):
            plain_first = args.plain_client and round_ % 2 == 1
            for plain in (True, False) if plain_first else (False, True):
                if plain and not args.plain_client:
                    continue
                record(run_broker(source, args.jobs, 2, args.window, plain_client=plain))
    if "memory" in only:
        big = conformance_cycle(args.workdir, args.memory_lines)
        record(run_rerender("memory-local-2", big, args.memory_lines,
                            "--config", str(CONFORMANCE / "worker.yaml"), "--workers", "2"))  # fmt: skip

    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=2))
        return 0
    print(f"{'run':<18}{'lines':>11}{'jobs/s':>9}{'wall s':>9}{'cpu s':>8}"
          f"{'peak RSS MB':>13}{'peak PSS MB':>13}{'exit':>6}")  # fmt: skip
    for r in results:
        print(f"{r.name:<18}{r.lines:>11,}{r.jobs_per_s:>9,.0f}{r.wall_s:>9.1f}{r.cpu_s:>8.1f}"
              f"{r.peak_rss_mb:>13.1f}{r.peak_pss_mb:>13.1f}{r.exit_code:>6}")  # fmt: skip
    rates: dict[str, list[float]] = {}
    for r in results:
        if r.name.startswith("local-"):
            rates.setdefault(r.name, []).append(r.jobs_per_s)
    if rates.get("local-1") and rates.get("local-2"):
        one, two = rates["local-1"], rates["local-2"]
        print(
            f"2 workers / 1 worker: best {max(two) / max(one):.2f}x, "
            f"median {statistics.median(two) / statistics.median(one):.2f}x "
            f"({len(one)} run(s) each)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
