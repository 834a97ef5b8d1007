"""uvloop against asyncio's own loop: two `serve` processes side by side, one queue.

`bench_e2e.py` runs its workers one after the other, and on a shared VM whose speed
drifts by 10 to 30% within seconds, the pairs of drains it measures cannot separate a
difference of a few per cent. Here the two workers run at the same time, one on each
loop, as competing consumers of one pre-filled request queue: whatever the machine
does, it does to both. Each one's CPU per job is its own CPU (from `/proc`, render
helper included) over the span from the first reply to the last, divided by the jobs
its log lines count over that span.

The second phase measures latency the same way the target does: sequential RPC calls
(window 1) through a `PromptClient`, against one worker at a time, the two loops
alternating round by round, then the percentiles of all calls of each loop.

    .venv/bin/python bench/bench_loops.py                       # 4 drains, 3 x 1,500 calls
    .venv/bin/python bench/bench_loops.py --rounds 6 --jobs 30000 --calls 2000
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
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage

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

from worker.transport import topology  # noqa: E402
from worker.transport.client import PromptClient  # noqa: E402

LOOPS = ("uvloop", "asyncio")


def start(loop: str, topo: topology.Topology, url: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**serve_env(topo, url, 64, CONFIG), "PROMPT_WORKER_EVENT_LOOP": loop}
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "worker", "serve"],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def jobs_logged(log: Path) -> int:
    with log.open("rb") as lines:
        return sum(1 for line in lines if b'"event":"job"' in line)


async def fresh_topology(channel: AbstractChannel) -> topology.Topology:
    prefix = f"bench-loops-{uuid.uuid4().hex[:8]}"
    topo = topology.Topology(f"{prefix}.build-prompt", f"{prefix}.replies", f"{prefix}.dead")
    await topology.declare(channel, topo)
    return topo


async def remove(channel: AbstractChannel, topo: topology.Topology) -> None:
    for name in topo.queue_names():
        await channel.queue_delete(name)
    await channel.exchange_delete(topo.dead_letter_exchange)


class SideBySide(Drain):
    """The drain of one pre-filled queue by both workers; each one's CPU and jobs are
    read at the first reply, so that start-up counts for neither."""

    def __init__(self, count: int, logs: dict[str, Path]) -> None:
        super().__init__(count)
        self.logs = logs
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.at_first: dict[str, tuple[float, int]] = {}

    async def _on_reply(self, message: AbstractIncomingMessage) -> None:
        if self.seen == 0:
            self.at_first = {
                loop: (cpu_seconds(process.pid), jobs_logged(self.logs[loop]))
                for loop, process in self.processes.items()
            }
        await super()._on_reply(message)

    def per_worker(self) -> dict[str, tuple[int, float]]:
        """{loop: (jobs, CPU ms a job)} from the first reply to now."""
        figures = {}
        for loop, process in self.processes.items():
            cpu, jobs = self.at_first[loop]
            jobs = jobs_logged(self.logs[loop]) - jobs
            figures[loop] = (jobs, (cpu_seconds(process.pid) - cpu) * 1000 / max(jobs, 1))
        return figures


async def side_by_side(
    body: bytes, args: argparse.Namespace, logs: Path
) -> dict[str, tuple[int, float]]:
    """One drain with both workers: {loop: (jobs, CPU ms a job)}."""
    async with await aio_pika.connect(args.amqp_url) as connection:
        channel = await connection.channel()
        topo = await fresh_topology(channel)
        try:
            meter = SideBySide(args.jobs, {loop: logs / f"{loop}.log" for loop in LOOPS})
            await meter.fill(channel, topo.request_queue, body)
            # The first started takes the first deliveries: alternate which one it is.
            for loop in reversed(LOOPS) if args.round % 2 else LOOPS:
                meter.processes[loop] = start(loop, topo, args.amqp_url, meter.logs[loop])
            try:
                meter.pids.extend(p.pid for p in meter.processes.values())
                await asyncio.wait_for(meter.done.wait(), timeout=args.phase_timeout)
                return meter.per_worker()
            finally:
                stop(list(meter.processes.values()))
        finally:
            await remove(channel, topo)


async def sequential(loop: str, body: bytes, args: argparse.Namespace, logs: Path) -> list[float]:
    """Latencies (s) of `--calls` sequential calls to one worker on `loop`."""
    async with await aio_pika.connect(args.amqp_url) as connection:
        channel = await connection.channel()
        topo = await fresh_topology(channel)
        process = start(loop, topo, args.amqp_url, logs / f"seq-{loop}.log")
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
    body = orjson.dumps(orjson.loads(JOB.read_bytes()))
    print(f"# {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; {len(body)} B job", flush=True)
    ratios = []
    with tempfile.TemporaryDirectory(prefix="bench-loops-") as tmp:
        logs = Path(tmp)
        for round_ in range(args.rounds):
            args.round = round_
            figures = await side_by_side(body, args, logs)
            ratio = figures["uvloop"][1] / figures["asyncio"][1]
            ratios.append(ratio)
            print(
                f"  drain {round_ + 1}: "
                + ", ".join(
                    f"{loop} {jobs:,} jobs {ms:.3f} CPU ms/job"
                    for loop, (jobs, ms) in figures.items()
                )
                + f"; uvloop/asyncio {ratio:.3f}",
                flush=True,
            )
        calls: dict[str, list[float]] = {loop: [] for loop in LOOPS}
        for round_ in range(args.call_rounds):
            for loop in reversed(LOOPS) if round_ % 2 else LOOPS:
                latencies = await sequential(loop, body, args, logs)
                calls[loop] += latencies
                print(
                    f"  sequential {round_ + 1} {loop}: p50 {percentile(latencies, 0.5) * 1000:.2f}"
                    f" p99 {percentile(latencies, 0.99) * 1000:.2f} ms",
                    flush=True,
                )
    if ratios:
        print(
            f"\nCPU per job, uvloop / asyncio, side by side: median {statistics.median(ratios):.3f}"
            f" (each drain: {', '.join(f'{r:.3f}' for r in ratios)})"
        )
    for loop, latencies in calls.items():
        if not latencies:  # --call-rounds 0
            continue
        print(
            f"sequential, {loop}, all {len(latencies):,} calls: p50"
            f" {percentile(latencies, 0.5) * 1000:.2f}, p90 {percentile(latencies, 0.9) * 1000:.2f},"
            f" p99 {percentile(latencies, 0.99) * 1000:.2f} ms"
        )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--amqp-url", default="amqp://guest:guest@127.0.0.1:5672/")
    parser.add_argument("--rounds", type=int, default=4, help="side-by-side drains")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per drain (both workers)")
    parser.add_argument("--call-rounds", type=int, default=3, help="sequential rounds per loop")
    parser.add_argument("--calls", type=int, default=1500, help="sequential calls per round")
    parser.add_argument("--phase-timeout", type=float, default=600.0)
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
