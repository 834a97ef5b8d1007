"""Values of one `serve` setting: one `serve` process each, side by side, one queue.

By default the event loop, uvloop against asyncio's own (`--setting event_loop
--values uvloop,asyncio`); any other setting of `serve` can be compared the same way.

`bench_e2e.py` runs its workers one after the other, and on a shared VM whose speed
drifts by 10 to 30% within seconds, the pairs of drains it measures cannot separate a
difference of a few per cent. Here the two workers run at the same time, one on each
value, as competing consumers of one pre-filled request queue: whatever the machine
does, it does to all. All are consuming before the queue is filled, so that none's
start-up is counted nor gives another a head start. Each one's CPU per job
is its own CPU (from `/proc`, render helper included) from then to the last reply,
divided by the jobs its log lines count.

The second phase measures latency the same way the target does: sequential RPC calls
(window 1) through a `PromptClient`, against one worker at a time, the values
alternating round by round, then the percentiles of all calls of each value.

    .venv/bin/python bench/bench_side_by_side.py        # the loops: 4 drains, 3 x 1,500 calls
    .venv/bin/python bench/bench_side_by_side.py --rounds 6 --jobs 30000 --calls 2000
    .venv/bin/python bench/bench_side_by_side.py --setting tracing --values on,10pct,1pct,off
    .venv/bin/python bench/bench_side_by_side.py --setting tree --values .,/tmp/before
    .venv/bin/python bench/bench_side_by_side.py --setting archive --values on,off

`--setting archive` compares recording every answered job on an archive stream (`on`: a
stream of the run's own, deleted after it) with no archive (`off`); it also prints the
stream's bytes a record.

`--setting tree` compares two checkouts (`git archive` of an older commit into a
directory): each value is a tree, whose `serve` runs from its own directory on this
checkout's virtual environment.

`--setting tracing` compares tracing variants (`off`, `on`: every job sampled, `10pct`
and `1pct`: one job in ten, in a hundred), set by the standard OTEL_* variables,
exporting over OTLP/HTTP to a sink in this process that accepts every batch, so that
what is measured is the worker's own cost and not a trace server's.

With more than two values, every ratio is against the last value (`off` above); the
order the workers start in turns round by round.
"""

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aio_pika
import orjson
from aio_pika.abc import AbstractChannel
from aiohttp import web

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_e2e import (  # noqa: E402
    CONFIG,
    JOB,
    Drain,
    cpu_seconds,
    percentile,
    serve_env,
    stop,
)

from tests.aio_pika_topology import declare_topology  # noqa: E402
from worker.transport.link import topology  # noqa: E402
from worker.transport.producers.client import PromptClient  # noqa: E402

# The port of the OTLP/HTTP receiver of `--setting tracing`, once started.
SINK_PORT = 0
TRACING: dict[str, dict[str, str]] = {
    "off": {},
    "on": {"OTEL_TRACES_SAMPLER": "parentbased_always_on"},
    "10pct": {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.1"},
    "1pct": {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.01"},
}


def archive_stream(topo: topology.Topology) -> str:
    """The archive stream of `--setting archive`'s `on` workers."""
    return f"{topo.request_queue}.archive"


def setting_env(setting: str, value: str, topo: topology.Topology) -> dict[str, str]:
    if setting == "tree":
        return {}
    if setting == "archive":
        return {"PROMPT_WORKER_ARCHIVE_STREAM": archive_stream(topo) if value == "on" else ""}
    if setting != "tracing":
        return {f"PROMPT_WORKER_{setting.upper()}": value}
    if value == "off":
        return {}
    # The SDK's own queue settings (OTEL_BSP_*): a batch every 5 s or 512 spans. Each
    # post costs the exporter about a millisecond of CPU whatever it carries, so a
    # shorter delay would weigh on the rarely sampled variants what production does not.
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{SINK_PORT}", **TRACING[value]}


async def start_trace_sink() -> web.AppRunner:
    """Accept every OTLP/HTTP batch at once, as a healthy receiver would."""
    global SINK_PORT

    async def accept(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(content_type="application/x-protobuf")

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/traces", accept)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    SINK_PORT = runner.addresses[0][1]
    return runner


def start(
    setting: str, value: str, topo: topology.Topology, url: str, log: Path
) -> subprocess.Popen[bytes]:
    env = {**serve_env(topo, url, 64, CONFIG), **setting_env(setting, value, topo)}
    # `--setting tree`: each value is a checkout, whose `serve` runs from its directory.
    cwd = Path(value).resolve() if setting == "tree" else REPO
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "worker", "serve"],
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def log_name(value: str) -> str:
    """A log file's name for a value (a `--setting tree` value is a path)."""
    return value.strip("/").replace("/", "_") + ".log"


def jobs_logged(log: Path) -> int:
    with log.open("rb") as lines:
        return sum(1 for line in lines if b'"event":"job"' in line)


async def fresh_topology(channel: AbstractChannel) -> topology.Topology:
    prefix = f"bench-pair-{uuid.uuid4().hex[:8]}"
    topo = topology.Topology(f"{prefix}.build-prompt", f"{prefix}.replies", f"{prefix}.dead")
    await declare_topology(channel, topo)
    return topo


async def remove(channel: AbstractChannel, topo: topology.Topology) -> None:
    for name in topo.queue_names():
        await channel.queue_delete(name)
    await channel.queue_delete(archive_stream(topo))  # --setting archive
    await channel.exchange_delete(topo.dead_letter_exchange)


class SideBySide(Drain):
    """The drain of one queue by both workers. Both are consuming before the queue is
    filled, and each one's CPU and jobs are read then: start-up counts for neither, and
    neither gets a head start on the deliveries."""

    def __init__(self, count: int, logs: dict[str, Path]) -> None:
        super().__init__(count)
        self.logs = logs
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.at_start: dict[str, tuple[float, int]] = {}

    async def wait_consuming(self) -> None:
        """Until every worker's log says it consumes; then read their CPU and jobs."""
        while not all(consuming(log) for log in self.logs.values()):
            for value, process in self.processes.items():
                if process.poll() is not None:
                    raise RuntimeError(f"the {value} worker exited with {process.returncode}")
            await asyncio.sleep(0.05)
        self.at_start = {
            value: (cpu_seconds(process.pid), jobs_logged(self.logs[value]))
            for value, process in self.processes.items()
        }

    def per_worker(self) -> dict[str, tuple[int, float]]:
        """{value: (jobs, CPU ms a job)} from the start of consuming to now."""
        figures = {}
        for value, process in self.processes.items():
            cpu, jobs = self.at_start[value]
            jobs = jobs_logged(self.logs[value]) - jobs
            figures[value] = (jobs, (cpu_seconds(process.pid) - cpu) * 1000 / max(jobs, 1))
        return figures


def consuming(log: Path) -> bool:
    return log.exists() and b'"event":"consuming"' in log.read_bytes()


async def side_by_side(
    body: bytes, args: argparse.Namespace, logs: Path
) -> dict[str, tuple[int, float]]:
    """One drain with both workers: {value: (jobs, CPU ms a job)}."""
    async with await aio_pika.connect(args.amqp_url) as connection:
        channel = await connection.channel()
        topo = await fresh_topology(channel)
        try:
            values = args.values
            meter = SideBySide(args.jobs, {value: logs / log_name(value) for value in values})
            turn = args.round % len(values)
            for value in values[turn:] + values[:turn]:
                meter.processes[value] = start(
                    args.setting, value, topo, args.amqp_url, meter.logs[value]
                )
            try:
                meter.pids.extend(p.pid for p in meter.processes.values())
                await asyncio.wait_for(meter.wait_consuming(), timeout=args.phase_timeout)
                await meter.fill(channel, topo.request_queue, body)
                await asyncio.wait_for(meter.done.wait(), timeout=args.phase_timeout)
                return meter.per_worker()
            finally:
                stop(list(meter.processes.values()))
        finally:
            await remove(channel, topo)


async def sequential(value: str, body: bytes, args: argparse.Namespace, logs: Path) -> list[float]:
    """Latencies (s) of `--calls` sequential calls to one worker with `value`."""
    async with await aio_pika.connect(args.amqp_url) as connection:
        channel = await connection.channel()
        topo = await fresh_topology(channel)
        process = start(args.setting, value, topo, args.amqp_url, logs / f"seq-{log_name(value)}")
        try:
            async with PromptClient(args.amqp_url, request_queue=topo.request_queue) as client:
                for _ in range(200):  # warm-up: connection, caches
                    await client.call(body, timeout=60)
                latencies = []
                for _ in range(args.calls):
                    sent = time.perf_counter()
                    await client.call(body, timeout=60)
                    latencies.append(time.perf_counter() - sent)
                return latencies
        finally:
            stop([process])
            await remove(channel, topo)


async def main(args: argparse.Namespace) -> None:
    sink = await start_trace_sink() if args.setting == "tracing" else None
    try:
        await compare(args)
    finally:
        if sink is not None:
            await sink.cleanup()


async def compare(args: argparse.Namespace) -> None:
    body = orjson.dumps(orjson.loads(JOB.read_bytes()))
    print(f"# {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; {len(body)} B job", flush=True)
    *compared, base = args.values
    if args.setting == "archive":
        print(f"# archive record of this job: {record_bytes(body):,} B (zstd)", flush=True)
    ratios: dict[str, list[float]] = {value: [] for value in compared}
    drains: dict[str, list[float]] = {value: [] for value in compared}
    with tempfile.TemporaryDirectory(prefix="bench-pair-") as tmp:
        logs = Path(tmp)
        for round_ in range(args.rounds):
            args.round = round_
            figures = await side_by_side(body, args, logs)
            for value in compared:
                ratios[value].append(figures[value][1] / figures[base][1])
                # Competing consumers of one queue: each takes jobs as fast as it drains.
                drains[value].append(figures[value][0] / max(figures[base][0], 1))
            print(
                f"  drain {round_ + 1}: "
                + ", ".join(
                    f"{value} {jobs:,} jobs {ms:.3f} CPU ms/job"
                    for value, (jobs, ms) in figures.items()
                )
                + "; "
                + ", ".join(
                    f"{value}/{base} CPU {ratios[value][-1]:.3f} drain {drains[value][-1]:.3f}"
                    for value in compared
                ),
                flush=True,
            )
        calls: dict[str, list[float]] = {value: [] for value in args.values}
        for round_ in range(args.call_rounds):
            for value in reversed(args.values) if round_ % 2 else args.values:
                latencies = await sequential(value, body, args, logs)
                calls[value] += latencies
                print(
                    f"  sequential {round_ + 1} {value}: p50 {percentile(latencies, 0.5) * 1000:.2f}"
                    f" p99 {percentile(latencies, 0.99) * 1000:.2f} ms",
                    flush=True,
                )
    for value, each in ratios.items():
        if not each:  # --rounds 0
            continue
        print(
            f"\nCPU per job, {value} / {base}, side by side: median {statistics.median(each):.3f}"
            f" (each drain: {', '.join(f'{r:.3f}' for r in each)})"
        )
        print(
            f"jobs drained, {value} / {base}, side by side: median"
            f" {statistics.median(drains[value]):.3f}"
        )
    for value, latencies in calls.items():
        if not latencies:  # --call-rounds 0
            continue
        print(
            f"sequential, {value}, all {len(latencies):,} calls: p50"
            f" {percentile(latencies, 0.5) * 1000:.2f}, p90 {percentile(latencies, 0.9) * 1000:.2f},"
            f" p99 {percentile(latencies, 0.99) * 1000:.2f} ms"
        )


def record_bytes(body: bytes) -> int:
    """The archive record of `body` as the worker publishes it: rendered with the
    bench's configuration, built and compressed by the worker's own code."""
    from worker.archive.record import RecordCompressor, RecordFacts, record_json, session_id_of
    from worker.render.config import load_config
    from worker.render.renderer import Renderer

    outcome = Renderer(load_config(CONFIG)).render(body)
    facts = RecordFacts(
        outcome.job, outcome.tools_json, outcome.kind, outcome.family, session_id_of(outcome.job)
    )
    return len(RecordCompressor().compress(record_json(facts, outcome.body, time.time(), "x")))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--amqp-url", default="amqp://guest:guest@127.0.0.1:5672/")
    parser.add_argument("--rounds", type=int, default=4, help="side-by-side drains")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per drain (both workers)")
    parser.add_argument("--call-rounds", type=int, default=3, help="sequential rounds per value")
    parser.add_argument("--calls", type=int, default=1500, help="sequential calls per round")
    parser.add_argument("--phase-timeout", type=float, default=600.0)
    parser.add_argument("--setting", default="event_loop", help="the `serve` setting compared")
    parser.add_argument(
        "--values",
        type=lambda text: tuple(text.split(",")),
        default=("uvloop", "asyncio"),
        help="two or more values, comma-separated (the last is the denominator of the ratios)",
    )
    args = parser.parse_args()
    if len(args.values) < 2 or len(set(args.values)) != len(args.values):
        parser.error("--values takes two or more different values")
    if args.setting == "tracing" and not set(args.values) <= set(TRACING):
        parser.error(f"--setting tracing takes values of {', '.join(TRACING)}")
    return args


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
