"""Reading the archive back: records a second re-rendered by `rerender --from-archive`,
and the bytes of a record, for typical jobs (SPEC §12, docs/RERENDER.md).

    .venv/bin/python bench/bench_archive_read.py                 # 20,000 records
    .venv/bin/python bench/bench_archive_read.py --records 100000 --fleet 2 --json

Records are made as serve makes them: each typical job of tests/bench_jobs (react and
native_thinking, alternating, 7 sessions) rendered with tests/bench_jobs/worker.yaml,
then built, compressed and given headers by worker/archive/record.py and published to a
stream of its own (deleted afterwards). Then, side by side in one run:

* `report --from-archive` (the read alone: every record decompressed and tallied);
* `rerender --from-archive` with the local engine, 1 and 2 render processes;
* with `--fleet N`, `rerender --from-archive --broker` through N `serve` processes on
  queues of their own (recording off: the read is measured, not the recorder).

Rates are records per second of the whole command (read, render, report), wall clock,
start-up included; the render phase's own rate is the report's `this_run.jobs_per_s`.
The machine is shared: the load average is printed beside the figures.
"""

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import aiormq
import orjson
from pamqp.commands import Basic

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from worker.archive.record import (  # noqa: E402
    RecordCompressor,
    RecordFacts,
    record_json,
    record_properties,
    session_id_of,
)
from worker.render.config import load_config  # noqa: E402
from worker.render.renderer import Renderer  # noqa: E402

BENCH_JOBS = REPO / "tests" / "bench_jobs"
CONFIG = BENCH_JOBS / "worker.yaml"
AMQP_URL = os.environ.get("PROMPT_WORKER_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
JOBS = ("typical_react_job.json", "typical_chat_job.json")


Made = list[tuple[bytes, Basic.Properties]]


def records(count: int) -> tuple[Made, dict[str, dict[str, int]]]:
    """`count` compressed records and their properties, as the worker's recorder makes
    them; bytes per record by kind."""
    renderer = Renderer(load_config(str(CONFIG)))
    compressor = RecordCompressor()
    made, sizes = [], {}
    for n in range(count):
        job = json.loads((BENCH_JOBS / JOBS[n % len(JOBS)]).read_text())
        job["job_id"] = f"bench-{n}"
        job["session"]["session_id"] = f"bench-session-{n % 7}"
        outcome = renderer.render(orjson.dumps(job))
        facts = RecordFacts(
            job=outcome.job,
            tools_json=outcome.tools_json,
            kind=outcome.kind,
            family=outcome.family,
            session_id=session_id_of(outcome.job),
        )
        now = time.time()
        data = record_json(facts, outcome.body, now, "bench")
        body = compressor.compress(data)
        if n < len(JOBS):
            sizes[str(outcome.kind)] = {
                "job_bytes": len(orjson.dumps(job)),
                "record_bytes": len(data),
                "compressed_bytes": len(body),
            }
        made.append((body, record_properties(facts, outcome.status, outcome.job_id, now)))
    return made, sizes


async def publish(stream: str, made: Made) -> None:
    connection = await aiormq.connect(AMQP_URL)
    channel = await connection.channel()
    await channel.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    await channel.confirm_delivery()
    batch = []
    for body, properties in made:
        batch.append(channel.basic_publish(body, routing_key=stream, properties=properties))
        if len(batch) >= 500:
            await asyncio.gather(*batch)
            batch = []
    await asyncio.gather(*batch)
    await connection.close()


async def delete(stream: str) -> None:
    connection = await aiormq.connect(AMQP_URL)
    channel = await connection.channel()
    await channel.queue_delete(stream)
    await connection.close()


def timed(name: str, count: int, command: list[str], report: Path | None) -> dict[str, Any]:
    started = time.monotonic()
    result = subprocess.run(command, cwd=REPO, capture_output=True, check=False)
    wall = time.monotonic() - started
    row: dict[str, Any] = {
        "run": name,
        "records": count,
        "wall_s": round(wall, 2),
        "records_per_s": round(count / wall, 1),
        "exit_code": result.returncode,
    }
    if report is not None and report.exists():
        summary = json.loads(report.read_text())
        row["render_jobs_per_s"] = summary["this_run"]["jobs_per_s"]
        row["drift_same"] = summary["totals"]["drift"]["same"]
    return row


def through_fleet(serves: int, count: int, source: list[str], work: Path) -> dict[str, Any]:
    """`rerender --from-archive --broker` through `serves` serve processes."""
    from bench_rerender import serve_fleet  # bench/ is the script's folder

    with serve_fleet(serves, "bench-archive-fleet") as request_queue:
        report = work / "fleet.report.json"
        return timed(
            f"rerender --from-archive --broker ({serves} serve)", count,
            [sys.executable, "-m", "worker", "rerender", *source,
             "--out", str(work / "out-fleet.jsonl"), f"--broker={AMQP_URL}",
             "--request-queue", request_queue, "--progress", "off", "--report", str(report)],
            report,
        )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--workdir", default="/tmp/bench-archive-read")
    parser.add_argument("--fleet", type=int, default=0, metavar="N", help="serve processes")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    stream = f"bench-archive-{uuid.uuid4().hex[:8]}"
    made, sizes = records(args.records)
    asyncio.run(publish(stream, made))
    base = [sys.executable, "-m", "worker"]
    source = ["--from-archive", AMQP_URL, "--archive-stream", stream, "--since", "1h"]
    rows = []
    try:
        rows.append(timed(
            "report --from-archive (read only)", args.records,
            [*base, "report", *source, "--html", str(work / "fleet.html"), "--progress", "off"],
            None,
        ))  # fmt: skip
        for workers in (1, 2):
            report = work / f"rerender-{workers}.report.json"
            rows.append(timed(
                f"rerender --from-archive --local --workers {workers}", args.records,
                [*base, "rerender", *source, "--out", str(work / f"out-{workers}.jsonl"),
                 "--config", str(CONFIG), "--workers", str(workers), "--progress", "off",
                 "--report", str(report)],
                report,
            ))  # fmt: skip
        if args.fleet:
            rows.append(through_fleet(args.fleet, args.records, source, work))
    finally:
        asyncio.run(delete(stream))
    results = {
        "records": args.records,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
        "bytes_per_record": sizes,
        "runs": rows,
    }
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{args.records:,} records; load average {results['load_average']}")
    for kind, size in sizes.items():
        print(f"  {kind}: job {size['job_bytes']:,} B, record {size['record_bytes']:,} B,"
              f" compressed {size['compressed_bytes']:,} B")  # fmt: skip
    for row in rows:
        print(f"  {row['run']}: {row['records_per_s']:,} records/s ({row['wall_s']} s),"
              f" render {row.get('render_jobs_per_s', '-')} jobs/s, exit {row['exit_code']}")  # fmt: skip


if __name__ == "__main__":
    main()
