"""Where an archive record's CPU goes: each part of recording one typical job, alone.

`bench_side_by_side.py --setting archive --values on,off` measures what recording costs
a worker; this splits a record into its parts, each timed in CPU (process time) over
many repetitions in one run: building the record's JSON from the reply's bytes, zstd
at several levels, the AMQP properties, pamqp's encoding of the content header (the
headers table is most of it), and aiormq's publish and confirm of the record on a
stream of the run's own (64 in flight, as a worker's prefetch would have them).

    .venv/bin/python bench/bench_archive.py
    .venv/bin/python bench/bench_archive.py --records 10000
"""

import argparse
import asyncio
import os
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import aiormq
import orjson
import pamqp.frame
import zstandard
from pamqp.commands import Basic
from pamqp.header import ContentHeader

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from worker.archive.record import (  # noqa: E402
    RecordCompressor,
    RecordFacts,
    record_json,
    record_properties,
    session_id_of,
)
from worker.archive.recorder import ArchiveSettings  # noqa: E402
from worker.render.config import load_config  # noqa: E402
from worker.render.renderer import Renderer  # noqa: E402

JOB = REPO / "tests" / "bench_jobs" / "typical_react_job.json"
CONFIG = REPO / "tests" / "bench_jobs" / "worker.yaml"


def cpu_us(work: Callable[[], object], repeat: int) -> float:
    """CPU microseconds a call of `work`."""
    started = time.process_time()
    for _ in range(repeat):
        work()
    return (time.process_time() - started) / repeat * 1e6


def properties(facts: RecordFacts) -> Basic.Properties:
    return record_properties(facts, "ok", "job-1", time.time())


async def publish_cpu_us(url: str, body: bytes, props: Basic.Properties, count: int) -> float:
    """CPU microseconds a record published and confirmed through aiormq, 64 in flight."""
    connection = await aiormq.connect(url)
    try:
        channel = await connection.channel(publisher_confirms=True)
        stream = f"bench-archive-{uuid.uuid4().hex[:8]}"
        settings = ArchiveSettings(stream, "1h", 1_000_000_000, 2.0)
        await channel.queue_declare(stream, durable=True, arguments=settings.arguments())
        try:
            window = asyncio.Semaphore(64)

            async def one() -> None:
                async with window:
                    await channel.basic_publish(
                        body, routing_key=stream, properties=props, mandatory=True, timeout=5
                    )

            tasks = [asyncio.ensure_future(one()) for _ in range(count)]
            started = time.process_time()
            await asyncio.gather(*tasks)
            return (time.process_time() - started) / count * 1e6
        finally:
            await channel.queue_delete(stream)
    finally:
        await connection.close()


def main(args: argparse.Namespace) -> None:
    body = orjson.dumps(orjson.loads(JOB.read_bytes()))
    outcome = Renderer(load_config(CONFIG)).render(body)
    facts = RecordFacts(
        outcome.job, outcome.tools_json, outcome.kind, outcome.family, session_id_of(outcome.job)
    )
    data = record_json(facts, outcome.body, time.time(), "0.1.0")
    compressor = RecordCompressor()
    compressed = compressor.compress(data)
    props = properties(facts)
    repeat = args.repeat
    print(f"# {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; {len(body):,} B job")
    print(f"record JSON {len(data):,} B, zstd level 1 {len(compressed):,} B")
    renderer = Renderer(load_config(CONFIG))
    print(f"render the job: {cpu_us(lambda: renderer.render(body), repeat):.1f} µs")
    took = cpu_us(lambda: record_json(facts, outcome.body, 0.0, "x"), repeat)
    print(f"record JSON from the reply's bytes: {took:.1f} µs")
    for level in (1, 3, 6):
        zstd = zstandard.ZstdCompressor(level=level)
        size = len(zstd.compress(data))
        took = cpu_us(lambda z=zstd: z.compress(data), repeat)  # type: ignore[misc]
        print(f"zstd level {level}: {took:.1f} µs, {size:,} B")
    print(f"properties: {cpu_us(lambda: properties(facts), repeat):.1f} µs")
    header = ContentHeader(0, len(compressed), props)
    print(
        f"content header (pamqp): {cpu_us(lambda: pamqp.frame.marshal(header, 1), repeat):.1f} µs"
    )
    publish = asyncio.run(publish_cpu_us(args.amqp_url, compressed, props, args.records))
    print(f"publish and confirm (aiormq): {publish:.1f} µs")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--amqp-url", default="amqp://guest:guest@127.0.0.1:5672/")
    parser.add_argument("--repeat", type=int, default=2000, help="repetitions of each part")
    parser.add_argument("--records", type=int, default=5000, help="records published")
    main(parser.parse_args())
