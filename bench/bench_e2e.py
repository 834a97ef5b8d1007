"""End to end through RabbitMQ: the real worker next to the echo worker (the anchor).

The anchor is `bench/echo_worker.py`: a worker that renders nothing, written with
aio-pika as its documentation shows (robust connection, `queue.consume`, `Message`,
`exchange.publish` with confirms, `message.ack`). It stays as it is, so that its figures
measure the machine of the run; `prompt-worker serve` is compared with it run by run.

For each worker (echo, then `prompt-worker serve`, then the Go echo when it can be
built: bench/goecho/, the ceiling) and each process count, on fresh
uniquely named queues of the real topology (quorum request queue, dead-lettering):

* drain: the workers start on the empty request queue and, once every process consumes
  from it, are stopped (SIGSTOP) while it is filled with N copies of the job, then go
  on: jobs/s between the first and the last reply, and the workers' CPU (processes and
  their children, from /proc) per job over that span. No process is still starting
  when the first reply comes, so start-up never counts against the jobs.
  Repeated `--repeat` times, echo and render interleaved so that a noisy spell of the
  machine lands on both; the table shows medians, each run is printed, and the summary
  adds the median ratio of each render drain to the echo drain just before it;
* live: a closed loop keeping `--window` jobs in flight for `--live-seconds`;
  jobs/s and latency percentiles (publish to reply received);
* sequential RPC: one job at a time (window 1); p50 and p99.

Every phase is bounded (job counts and seconds), the workers are stopped and the
queues deleted at the end, even on Ctrl-C.

    .venv/bin/python bench/bench_e2e.py                 # 1 and 2 processes, both workers
    .venv/bin/python bench/bench_e2e.py --quick         # a smoke run
    .venv/bin/python bench/bench_e2e.py --drain-only    # CPU/job and drain pairs only
    .venv/bin/python bench/bench_e2e.py --before /tmp/before   # + the worker of another tree
    .venv/bin/python bench/bench_e2e.py --workers echo,render-asyncio,render   # uvloop or not
    .venv/bin/python bench/bench_e2e.py --json results.json
"""

import argparse
import asyncio
import contextlib
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import aio_pika
import orjson
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.aio_pika_topology import declare_topology  # noqa: E402
from worker.transport.link import topology  # noqa: E402
from worker.transport.producers.client import PromptClient  # noqa: E402

JOB = REPO / "tests" / "bench_jobs" / "typical_react_job.json"
CONFIG = REPO / "tests" / "bench_jobs" / "worker.yaml"
GOECHO = REPO / "bench" / "goecho"
WORKERS = {
    "echo": [sys.executable, str(REPO / "bench" / "echo_worker.py")],
    "render": [sys.executable, "-m", "worker", "serve"],
    # The same worker on asyncio's own loop instead of uvloop (its default).
    "render-asyncio": [sys.executable, "-m", "worker", "serve", "--event-loop", "asyncio"],
    "go": [str(GOECHO / "goecho")],
}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
LIVE_FIELDS = (
    "live_jobs_per_s",
    "live_p50_ms",
    "live_p95_ms",
    "live_p99_ms",
    "seq_p50_ms",
    "seq_p99_ms",
)


@dataclass
class Figures:
    worker: str
    processes: int
    drain_jobs: int
    drain_jobs_per_s: float  # median of the runs
    cpu_ms_per_job: float  # median of the runs
    live_jobs_per_s: float
    live_p50_ms: float
    live_p95_ms: float
    live_p99_ms: float
    seq_p50_ms: float
    seq_p99_ms: float
    drain_runs: list[tuple[float, float]]  # (jobs/s, CPU ms/job) of every run


def cpu_seconds(pid: int) -> float:
    """User + system CPU of `pid` and its live children (the render helper)."""
    total = 0.0
    pids = [pid]
    with contextlib.suppress(OSError):
        pids += [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    for one in pids:
        try:
            fields = Path(f"/proc/{one}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    return total


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@contextlib.contextmanager
def workers(
    kind: str, count: int, topo: topology.Topology, args: argparse.Namespace
) -> Iterator[list[subprocess.Popen[bytes]]]:
    # "before": `serve` of another checkout (`--before`), run from its own directory.
    command, cwd = (WORKERS["render"], args.before) if kind == "before" else (WORKERS[kind], REPO)
    env = serve_env(topo, args.amqp_url, args.prefetch, args.config)
    processes = [
        subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(count)
    ]
    try:
        yield processes
    finally:
        stop(processes)


def serve_env(
    topo: topology.Topology, amqp_url: str, prefetch: int, config: Path | str
) -> dict[str, str]:
    """The environment of a `serve` process on `topo`'s queues (no HTTP server)."""
    return {
        **os.environ,
        "PROMPT_WORKER_AMQP_URL": amqp_url,
        "PROMPT_WORKER_REQUEST_QUEUE": topo.request_queue,
        "PROMPT_WORKER_REPLY_QUEUE": topo.reply_queue,
        "PROMPT_WORKER_DEAD_LETTER_QUEUE": topo.dead_letter,
        "PROMPT_WORKER_PREFETCH": str(prefetch),
        "PROMPT_WORKER_CONFIG": str(config),
        "PROMPT_WORKER_HTTP_PORT": "0",
        "PROMPT_WORKER_LOG_LEVEL": "info",
        "PROMPT_WORKER_LOG_FORMAT": "json",
        # Off unless a bench compares it (bench_side_by_side.py --setting archive).
        "PROMPT_WORKER_ARCHIVE_STREAM": "",
    }


def stop(processes: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM, then up to 30 s to finish, then SIGKILL."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class Drain:
    """A pre-filled request queue, and the clock and CPU meter for draining it."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.seen = 0
        self.first = self.last = 0.0
        self.cpu_first = 0.0
        self.pids: list[int] = []
        self.done = asyncio.Event()

    async def listen(self, channel: AbstractChannel) -> str:
        """The reply queue, consumed: its name."""
        replies = await channel.declare_queue("", exclusive=True)
        await replies.consume(self._on_reply, no_ack=True)
        return replies.name

    async def fill(
        self, channel: AbstractChannel, queue: str, body: bytes, reply_to: str | None = None
    ) -> None:
        """Publish the jobs, replies to `reply_to` (a reply queue of its own if None)."""
        if reply_to is None:
            reply_to = await self.listen(channel)
        for start in range(0, self.count, 500):
            await asyncio.gather(
                *(
                    channel.default_exchange.publish(
                        aio_pika.Message(
                            body,
                            reply_to=reply_to,
                            correlation_id=str(i),
                            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                        ),
                        routing_key=queue,
                    )
                    for i in range(start, min(start + 500, self.count))
                )
            )

    async def _on_reply(self, _: AbstractIncomingMessage) -> None:
        self.seen += 1
        if self.seen == 1:
            self.first = time.perf_counter()
            self.cpu_first = sum(cpu_seconds(p) for p in self.pids)
        if self.seen == self.count:
            self.last = time.perf_counter()
            self.cpu_last = sum(cpu_seconds(p) for p in self.pids)
            self.done.set()

    def figures(self) -> tuple[float, float]:
        """Jobs/s and worker CPU ms per job, from the first reply to the last."""
        jobs = self.count - 1
        return jobs / (self.last - self.first), (self.cpu_last - self.cpu_first) * 1000 / jobs


async def consumers(channel: AbstractChannel, queue: str, count: int) -> None:
    """Wait until `count` consumers consume from `queue` (every process has started)."""
    while True:
        declared = await channel.declare_queue(queue, passive=True)
        if (declared.declaration_result.consumer_count or 0) >= count:
            return
        await asyncio.sleep(0.05)


async def windowed(
    client: PromptClient, body: bytes, window: int, seconds: float, limit: int
) -> tuple[int, float, list[float]]:
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def loop() -> None:
        while time.perf_counter() < deadline and len(latencies) < limit:
            sent = time.perf_counter()
            await client.call(body, timeout=60)
            latencies.append(time.perf_counter() - sent)

    started = time.perf_counter()
    await asyncio.gather(*(loop() for _ in range(window)))
    return len(latencies), time.perf_counter() - started, latencies


async def live_phases(
    topo: topology.Topology, body: bytes, args: argparse.Namespace
) -> dict[str, float]:
    out: dict[str, float] = {}
    async with PromptClient(args.amqp_url, request_queue=topo.request_queue) as client:
        # Warm-up: connections, helper processes, caches.
        await windowed(client, body, args.window, 0.5, 10_000)
        done, elapsed, lat = await windowed(client, body, args.window, args.live_seconds, 10**9)
        out["live_jobs_per_s"] = done / elapsed
        out["live_p50_ms"] = percentile(lat, 0.50) * 1000
        out["live_p95_ms"] = percentile(lat, 0.95) * 1000
        out["live_p99_ms"] = percentile(lat, 0.99) * 1000
        _, _, seq = await windowed(client, body, 1, args.live_seconds * 2, args.sequential)
        out["seq_p50_ms"] = percentile(seq, 0.50) * 1000
        out["seq_p99_ms"] = percentile(seq, 0.99) * 1000
    return out


async def run_one(
    kind: str, count: int, body: bytes, args: argparse.Namespace, live: bool
) -> tuple[tuple[float, float], dict[str, float]]:
    """One drain (jobs/s, CPU ms/job), then the live phases if asked, on fresh queues."""
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    topo = topology.Topology(f"{prefix}.build-prompt", f"{prefix}.replies", f"{prefix}.dead")
    connection = await aio_pika.connect(args.amqp_url)
    phases: dict[str, float] = {}
    async with connection:
        channel = await connection.channel()
        await declare_topology(channel, topo)
        try:
            meter = Drain(args.jobs)
            reply_to = await meter.listen(channel)
            with workers(kind, count, topo, args) as processes:
                meter.pids.extend(p.pid for p in processes)
                await asyncio.wait_for(
                    consumers(channel, topo.request_queue, count), timeout=args.phase_timeout
                )
                for process in processes:
                    os.kill(process.pid, signal.SIGSTOP)
                try:
                    await meter.fill(channel, topo.request_queue, body, reply_to)
                finally:
                    for process in processes:
                        os.kill(process.pid, signal.SIGCONT)
                await asyncio.wait_for(meter.done.wait(), timeout=args.phase_timeout)
                drained = meter.figures()
                if live:
                    phases = await asyncio.wait_for(
                        live_phases(topo, body, args), timeout=args.phase_timeout
                    )
        finally:
            for name in topo.queue_names():
                await channel.queue_delete(name)
            await channel.exchange_delete(topo.dead_letter_exchange)
    return drained, phases


async def measure(count: int, body: bytes, args: argparse.Namespace) -> list[Figures]:
    """Every worker at `count` processes: interleaved drains, live phases on the last."""
    runs: dict[str, list[tuple[float, float]]] = {kind: [] for kind in args.workers}
    phases: dict[str, dict[str, float]] = {}
    for repeat in range(args.repeat):
        last = repeat == args.repeat - 1 and not args.drain_only
        for kind in args.workers:
            drained, live = await run_one(kind, count, body, args, live=last)
            runs[kind].append(drained)
            phases[kind] = live or dict.fromkeys(LIVE_FIELDS, float("nan"))
            print(
                f"  {kind} x{count} run {repeat + 1}: {drained[0]:,.0f} jobs/s drain, "
                f"{drained[1]:.3f} CPU ms/job",
                flush=True,
            )
    return [
        Figures(
            kind,
            count,
            args.jobs,
            statistics.median(rate for rate, _ in runs[kind]),
            statistics.median(cpu for _, cpu in runs[kind]),
            drain_runs=runs[kind],
            **phases[kind],
        )
        for kind in args.workers
    ]


def go_echo_ready() -> str | None:
    """None when the Go echo worker is built (building it if Go is here), else why not."""
    if (GOECHO / "goecho").exists():
        return None
    build = subprocess.run(
        [str(GOECHO / "build"), "--no-install"], capture_output=True, text=True, check=False
    )
    if build.returncode != 0:
        return build.stderr.strip().splitlines()[-1] if build.stderr.strip() else "build failed"
    return None


def table(rows: list[Figures]) -> str:
    head = (
        "| worker | procs | drain jobs/s | CPU ms/job | live jobs/s | live p50 / p95 / p99 ms"
        " | sequential p50 / p99 ms |\n|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in rows:
        lines.append(
            f"| {r.worker} | {r.processes} | {r.drain_jobs_per_s:,.0f} | {r.cpu_ms_per_job:.3f} "
            f"| {r.live_jobs_per_s:,.0f} | {r.live_p50_ms:.1f} / {r.live_p95_ms:.1f} / "
            f"{r.live_p99_ms:.1f} | {r.seq_p50_ms:.2f} / {r.seq_p99_ms:.2f} |"
        )
    by = {(r.worker, r.processes): r for r in rows}
    for procs in sorted({r.processes for r in rows}):
        echo, real = by.get(("echo", procs)), by.get(("render", procs))
        if echo and real:
            # Each render drain ran right after an echo drain: the ratios of these
            # neighbours share the machine's drift, which the medians above do not.
            pairs = list(zip(echo.drain_runs, real.drain_runs, strict=True))
            paired_drain = statistics.median(r[0] / e[0] for e, r in pairs)
            paired_cpu = statistics.median(r[1] / e[1] for e, r in pairs)
            lines.append(
                f"\n{procs} process(es): drain {real.drain_jobs_per_s / echo.drain_jobs_per_s:.0%}"
                f" of echo (target > 100%), CPU/job {real.cpu_ms_per_job / echo.cpu_ms_per_job:.2f}x"
                f" echo (target <= 0.85x), sequential p99 {real.seq_p99_ms:.2f} ms (target < 5 ms)"
                f"\n  median of the {len(pairs)} echo/render pairs: drain {paired_drain:.0%},"
                f" CPU/job {paired_cpu:.2f}x"
            )
        go = by.get(("go", procs))
        if go and real:
            lines.append(
                f"  against the Go echo (ceiling): render drain {real.drain_jobs_per_s / go.drain_jobs_per_s:.0%},"
                f" CPU/job {real.cpu_ms_per_job / go.cpu_ms_per_job:.2f}x"
                + (
                    f"; aio-pika echo drain {echo.drain_jobs_per_s / go.drain_jobs_per_s:.0%},"
                    f" CPU/job {echo.cpu_ms_per_job / go.cpu_ms_per_job:.2f}x"
                    if echo
                    else ""
                )
            )
        for kind, label in (
            ("before", "the tree before (--before)"),
            ("render-asyncio", "render on asyncio's loop"),
        ):
            other = by.get((kind, procs))
            if echo and other:
                pairs = list(zip(echo.drain_runs, other.drain_runs, strict=True))
                lines.append(
                    f"  {label}, median of its {len(pairs)} pairs with echo: drain"
                    f" {statistics.median(b[0] / e[0] for e, b in pairs):.0%}, CPU/job"
                    f" {statistics.median(b[1] / e[1] for e, b in pairs):.2f}x"
                )
    return "\n".join(lines)


async def main(args: argparse.Namespace) -> list[Figures]:
    job = orjson.loads(JOB.read_bytes())
    body = orjson.dumps(job)
    rows = []
    if "go" in args.workers:
        why = go_echo_ready()
        if why is not None:
            args.workers = [kind for kind in args.workers if kind != "go"]
            print(f"# Go echo row skipped: {why} (see bench/goecho/README.md)", flush=True)
    print(
        f"# {platform.node()}: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; "
        f"{len(body)} B job, {args.jobs} drained x {args.repeat}, window {args.window}, "
        f"prefetch {args.prefetch}",
        flush=True,
    )
    for count in args.processes:
        for figures in await measure(count, body, args):
            rows.append(figures)
            print(
                f"  {figures.worker} x{count}: median {figures.drain_jobs_per_s:,.0f} jobs/s "
                f"drain, {figures.cpu_ms_per_job:.3f} CPU ms/job, "
                f"{figures.live_jobs_per_s:,.0f} live, seq p99 {figures.seq_p99_ms:.2f} ms",
                flush=True,
            )
    print()
    print(table(rows))
    return rows


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--amqp-url", default="amqp://guest:guest@127.0.0.1:5672/")
    parser.add_argument("--config", default=str(CONFIG))
    parser.add_argument("--jobs", type=int, default=5000, help="jobs drained per run")
    parser.add_argument("--repeat", type=int, default=3, help="drains per worker (median)")
    parser.add_argument("--live-seconds", type=float, default=5.0)
    parser.add_argument("--window", type=int, default=64, help="jobs in flight, live phase")
    parser.add_argument("--sequential", type=int, default=1000, help="calls, window 1")
    parser.add_argument("--prefetch", type=int, default=64)
    parser.add_argument(
        "--processes", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2]
    )
    parser.add_argument(
        "--workers",
        type=lambda s: s.split(","),
        default=["echo", "render", "go"],
        help="echo, render, render-asyncio (serve on asyncio's loop), go (the Go echo: "
        "skipped with a note when Go is absent)",
    )
    parser.add_argument("--phase-timeout", type=float, default=300.0)
    parser.add_argument(
        "--drain-only", action="store_true", help="skip the live and sequential phases"
    )
    parser.add_argument(
        "--before",
        metavar="TREE",
        help="also measure `serve` from this checkout (e.g. `git archive` of an older commit)",
    )
    parser.add_argument("--quick", action="store_true", help="small counts, for a smoke run")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = parser.parse_args()
    if args.before and "before" not in args.workers:
        args.workers.insert(args.workers.index("render"), "before")
    if args.quick:
        args.jobs, args.live_seconds, args.sequential, args.repeat = 500, 1.0, 100, 1
    return args


if __name__ == "__main__":
    arguments = parse_args()
    figures = asyncio.run(main(arguments))
    if arguments.json:
        Path(arguments.json).write_text(json.dumps([asdict(r) for r in figures], indent=2))
