"""Soak: `prompt-worker serve` over a long run of mixed jobs, its memory over time.

One worker process (and its render helper) serves fresh, uniquely named queues of the
real topology. Jobs are drawn from a fixed, seeded mix: the typical jobs of
`tests/bench_jobs` and `bench/jobs`, every conformance case (`tests/conformance`), a
job offloaded to the helper now and then (300 KB), a large one rarely (2 MiB) and a
body that is not JSON (dead-lettered) rarely. The request queue is filled in batches so
that at most `--window` jobs wait in the broker at a time: the run exercises the worker,
not the broker's memory. Replies are read from the default reply queue as they come.

Every `--sample-seconds` the resident memory (VmRSS) of the worker and of its helper
is recorded with the jobs answered so far. The summary compares the memory after the
warm-up (the first `--warmup` share of the jobs) with the highest and the last sample,
and gives the growth per 100,000 jobs after the warm-up; `--json` writes every sample.

    .venv/bin/python bench/bench_soak.py                      # 1,000,000 jobs
    .venv/bin/python bench/bench_soak.py --jobs 200000        # a shorter run
    .venv/bin/python bench/bench_soak.py --json soak.json

The worker is stopped and the queues deleted at the end, even on Ctrl-C.
"""

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aio_pika
import aiohttp
import orjson
from aio_pika.abc import AbstractIncomingMessage

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.aio_pika_topology import declare_topology  # noqa: E402
from worker.transport.link import topology  # noqa: E402

CONFIG = REPO / "tests" / "bench_jobs" / "worker.yaml"
TYPICAL = [
    REPO / "tests" / "bench_jobs" / "typical_react_job.json",
    REPO / "tests" / "bench_jobs" / "typical_chat_job.json",
    REPO / "bench" / "jobs" / "typical_legacy_react_job.json",
    REPO / "bench" / "jobs" / "typical_skill_job.json",
    REPO / "bench" / "jobs" / "typical_system_prompt_job.json",
]
CASES = [
    REPO / "tests" / "conformance" / "cases.jsonl",
    REPO / "tests" / "conformance" / "families.jsonl",
]
# Out of 10,000 jobs; the rest are typical jobs and conformance cases, half and half.
OFFLOADED_PER_10K = 50
LARGE_PER_10K = 5
NOT_JSON_PER_10K = 10


@dataclass
class Sample:
    seconds: float
    answered: int
    worker_rss_mib: float
    helper_rss_mib: float


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def helper_rss_mib(pid: int) -> float:
    """The render helper's memory (the largest child: the other is a resource tracker)."""
    try:
        children = [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return 0.0
    return max((rss_mib(child) for child in children), default=0.0)


def bodies() -> tuple[list[bytes], list[bytes], bytes, bytes, bytes]:
    """Typical jobs, conformance cases, an offloaded job, a large job, a non-JSON body."""
    typical = [path.read_bytes() for path in TYPICAL]
    cases = [
        orjson.dumps(orjson.loads(line)["job"])
        for path in CASES
        for line in path.read_bytes().splitlines()
        if line.strip()
    ]
    base = orjson.loads(TYPICAL[0].read_bytes())

    def sized(job_id: str, size: int) -> bytes:
        job = json.loads(json.dumps(base))
        job["job_id"] = job_id
        job["session"]["alert_data"] = "status: firing\n" * (size // 15)
        return orjson.dumps(job)

    return typical, cases, sized("soak-offloaded", 300_000), sized("soak-large", 2 << 20), b"{no"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def worker(topo: topology.Topology, args: argparse.Namespace, port: int) -> Iterator[int]:
    env = {
        **os.environ,
        "PROMPT_WORKER_AMQP_URL": args.amqp_url,
        "PROMPT_WORKER_REQUEST_QUEUE": topo.request_queue,
        "PROMPT_WORKER_REPLY_QUEUE": topo.reply_queue,
        "PROMPT_WORKER_DEAD_LETTER_QUEUE": topo.dead_letter,
        "PROMPT_WORKER_CONFIG": str(args.config),
        "PROMPT_WORKER_HTTP_PORT": str(port),
        "PROMPT_WORKER_HTTP_HOST": "127.0.0.1",
        "PROMPT_WORKER_LOG_LEVEL": "info",
        "PROMPT_WORKER_LOG_FORMAT": "json",
        "PROMPT_WORKER_ARCHIVE_STREAM": "",  # not what is measured (docs/ARCHIVE.md)
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "worker", "serve"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield process.pid
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def metrics_text(port: int) -> str:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session,
        session.get(f"http://127.0.0.1:{port}/metrics") as response,
    ):
        return await response.text()


async def wait_ready(port: int, within: float = 60) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        with contextlib.suppress(aiohttp.ClientError, OSError):
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session,
                session.get(f"http://127.0.0.1:{port}/readyz") as response,
            ):
                if response.status == 200:
                    return
        await asyncio.sleep(0.2)
    raise SystemExit("the worker did not become ready")


async def soak(args: argparse.Namespace) -> dict[str, Any]:
    topo = topology.Topology(
        request_queue=f"bench-soak-{uuid.uuid4().hex[:8]}.build-prompt",
        reply_queue=f"bench-soak-{uuid.uuid4().hex[:8]}.replies",
        dead_letter=f"bench-soak-{uuid.uuid4().hex[:8]}.dead",
    )
    typical, cases, offloaded, large, not_json = bodies()
    rng = random.Random(args.seed)
    connection = await aio_pika.connect(args.amqp_url)
    port = free_port()
    try:
        channel = await connection.channel(publisher_confirms=True)
        await declare_topology(channel, topo)
        answered = 0
        done = asyncio.Event()

        async def on_reply(message: AbstractIncomingMessage) -> None:
            nonlocal answered
            answered += 1
            if answered >= args.jobs:
                done.set()

        reply_channel = await connection.channel()
        await reply_channel.set_qos(prefetch_count=1000)
        replies = await reply_channel.get_queue(topo.reply_queue, ensure=False)
        await replies.consume(on_reply, no_ack=True)

        def pick() -> bytes:
            draw = rng.randrange(10_000)
            if draw < LARGE_PER_10K:
                return large
            if draw < LARGE_PER_10K + NOT_JSON_PER_10K:
                return not_json
            if draw < LARGE_PER_10K + NOT_JSON_PER_10K + OFFLOADED_PER_10K:
                return offloaded
            return rng.choice(typical if draw % 2 else cases)

        samples: list[Sample] = []
        published = 0
        with worker(topo, args, port) as pid:
            await wait_ready(port)
            started = time.monotonic()
            next_sample = started
            while not done.is_set():
                now = time.monotonic()
                if now >= next_sample:
                    samples.append(
                        Sample(
                            round(now - started, 1),
                            answered,
                            round(rss_mib(pid), 1),
                            round(helper_rss_mib(pid), 1),
                        )
                    )
                    next_sample = now + args.sample_seconds
                    if args.verbose:
                        print(samples[-1], flush=True)
                if now - started > args.timeout:
                    # Out of time: the figures so far still say whether memory grows.
                    print(f"time limit: {answered} of {args.jobs} answered", flush=True)
                    break
                waiting = published - answered
                if published < args.jobs and waiting < args.window // 2:
                    batch = min(args.window - waiting, args.jobs - published)
                    await asyncio.gather(
                        *(
                            channel.default_exchange.publish(
                                aio_pika.Message(pick()), routing_key=topo.request_queue
                            )
                            for _ in range(batch)
                        )
                    )
                    published += batch
                    continue
                await asyncio.sleep(0.05)
            elapsed = time.monotonic() - started
            samples.append(
                Sample(
                    round(elapsed, 1),
                    answered,
                    round(rss_mib(pid), 1),
                    round(helper_rss_mib(pid), 1),
                )
            )
            text = await metrics_text(port)
        peak_bytes = next(
            (
                float(line.split()[1])
                for line in text.splitlines()
                if line.startswith("prompt_worker_in_flight_bytes_peak ")
            ),
            None,
        )
    finally:
        with contextlib.suppress(Exception):
            cleanup = await connection.channel()
            for name in topo.queue_names():
                await cleanup.queue_delete(name)
            await cleanup.exchange_delete(topo.dead_letter_exchange)
        await connection.close()
    return summarise(samples, args, elapsed, peak_bytes)


def summarise(
    samples: list[Sample], args: argparse.Namespace, elapsed: float, peak_bytes: float | None
) -> dict[str, Any]:
    answered = samples[-1].answered
    warm = next((s for s in samples if s.answered >= answered * args.warmup), samples[-1])
    after = [s for s in samples if s.answered >= warm.answered]
    last = samples[-1]
    worker_max = max(s.worker_rss_mib for s in after)
    helper_max = max(s.helper_rss_mib for s in after)
    jobs_after = max(1, last.answered - warm.answered)
    return {
        "jobs": args.jobs,
        "answered": answered,
        "complete": answered >= args.jobs,
        "seconds": round(elapsed, 1),
        "jobs_per_s": round(answered / elapsed, 1),
        "warmup_jobs": warm.answered,
        "worker_rss_mib": {
            "after_warmup": warm.worker_rss_mib,
            "max": worker_max,
            "last": last.worker_rss_mib,
        },
        "helper_rss_mib": {
            "after_warmup": warm.helper_rss_mib,
            "max": helper_max,
            "last": last.helper_rss_mib,
        },
        "worker_growth_mib_per_100k_jobs": round(
            (last.worker_rss_mib - warm.worker_rss_mib) * 100_000 / jobs_after, 2
        ),
        "in_flight_bytes_peak": peak_bytes,
        "load_average": os.getloadavg(),
        "samples": [asdict(s) for s in samples],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--amqp-url", default="amqp://guest:guest@127.0.0.1:5672/")
    parser.add_argument("--config", type=Path, default=CONFIG)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--window", type=int, default=2_000, help="jobs waiting in the broker")
    parser.add_argument("--sample-seconds", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=0.1, help="share of the jobs")
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument(
        "--timeout", type=float, default=6 * 3600, help="seconds; stop there and report"
    )
    parser.add_argument("--verbose", action="store_true", help="print every sample")
    parser.add_argument("--json", type=Path, help="also write the summary and samples")
    args = parser.parse_args()
    result = asyncio.run(soak(args))
    table = [
        s for i, s in enumerate(result["samples"]) if i % max(1, len(result["samples"]) // 12) == 0
    ]
    print(f"{'s':>8} {'answered':>10} {'worker MiB':>11} {'helper MiB':>11}")
    for s in [*table, result["samples"][-1]]:
        print(
            f"{s['seconds']:>8} {s['answered']:>10} {s['worker_rss_mib']:>11} {s['helper_rss_mib']:>11}"
        )
    summary = {k: v for k, v in result.items() if k != "samples"}
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
