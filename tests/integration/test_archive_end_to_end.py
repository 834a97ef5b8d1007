"""The archive end to end (SPEC §12, issue 44's "must hold"): typical jobs through a
real `serve`, which records them; then `rerender --from-archive` finds a record for
each and reports them all `same`, with either engine; a template edit flags the
changed jobs and nothing else; across a SIGKILL of `serve` every acknowledged job has
a record and each duplicate is flagged; a credential in a job never reaches the fleet
page. The default suite sends a few hundred jobs; the `slow` variant the issue's
10,000. Run on RabbitMQ 4.0 too with PROMPT_WORKER_TEST_AMQP_URL (docs/TESTING.md).
"""

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import aio_pika
import orjson
import pytest
from aio_pika.abc import AbstractChannel

from tests.data import REPO
from tests.integration.archive_records import collect_job_ids
from tests.integration.helpers import (
    AMQP_URL,
    StartWorker,
    a_job,
    archive_stream,
    queue_depth,
    wait_for,
)
from tests.integration.test_archive_recording import secret_text
from tests.rerender.runs import EDIT_BEFORE, tarsy_template_edit
from worker.cli import main
from worker.transport.link.topology import Topology

pytestmark = pytest.mark.broker

BENCH = REPO / "tests" / "bench_jobs"
CONFIG = BENCH / "worker.yaml"
TYPICAL = [
    json.loads((BENCH / name).read_text())
    for name in ("typical_react_job.json", "typical_chat_job.json")
]
SESSIONS = 7


def typical_jobs(count: int, prefix: str) -> list[dict[str, Any]]:
    """`count` typical jobs, alternating the two kinds, spread over a few sessions."""
    jobs = []
    for n in range(count):
        job = json.loads(json.dumps(TYPICAL[n % len(TYPICAL)]))
        job["job_id"] = f"{prefix}-{n:05d}"
        job["session"]["session_id"] = f"{prefix}-session-{n % SESSIONS}"
        jobs.append(job)
    return jobs


async def send_and_collect(
    channel: AbstractChannel, topo: Topology, jobs: list[dict[str, Any]], *, kill: Any = None
) -> list[str]:
    """Publish `jobs` to the request queue; the job ids of the replies, once every job
    has one. `kill`: awaited once a quarter of the jobs are answered."""
    for job in jobs:
        await channel.default_exchange.publish(
            aio_pika.Message(orjson.dumps(job), delivery_mode=2), routing_key=topo.request_queue
        )
    answered = await collect_job_ids(channel, topo.reply_queue)
    if kill is not None:

        async def a_quarter() -> bool:
            return len(answered) >= len(jobs) // 4

        await wait_for(a_quarter, 300, "a quarter of the replies before the kill")
        await kill()
    ids = {job["job_id"] for job in jobs}

    async def all_answered() -> bool:
        return ids <= set(answered)

    await wait_for(all_answered, 60 + len(jobs) * 0.1, "every job answered")

    async def settled() -> bool:
        return await queue_depth(channel, topo.request_queue) == 0

    await wait_for(settled, 60, "the request queue empty")
    return answered


def run_rerender(
    tmp_path: Path, name: str, topo: Topology, *extra: str
) -> tuple[int, dict[str, Any]]:
    """The real command, as an operator runs it."""
    out, report = tmp_path / f"{name}.jsonl", tmp_path / f"{name}.report.json"
    result = subprocess.run(
        [sys.executable, "-m", "worker", "rerender", "--from-archive", AMQP_URL,
         "--archive-stream", archive_stream(topo), "--since", "1h", "--out", str(out),
         "--progress", "off", "--report", str(report), *extra],
        cwd=REPO, capture_output=True, timeout=1800, check=False,
    )  # fmt: skip
    assert report.exists(), result.stderr.decode()
    return result.returncode, json.loads(report.read_text())


async def rerender(
    tmp_path: Path, name: str, topo: Topology, *extra: str
) -> tuple[int, dict[str, Any]]:
    return await asyncio.to_thread(run_rerender, tmp_path, name, topo, *extra)


def read_jsonl(path: Path | str) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in Path(path).read_bytes().splitlines()]


def rerender_edited(out: Path, topo: Topology) -> int:
    """In this process, with the tarsy template edited (one render process: the edit
    is this process's)."""
    with tarsy_template_edit():
        return main(
            ["rerender", "--from-archive", AMQP_URL, "--archive-stream", archive_stream(topo),
             "--since", "1h", "--out", str(out), "--config", str(CONFIG), "--workers", "1",
             "--progress", "off", "--diff-limit", "0"]
        )  # fmt: skip


async def through_serve_and_back(
    start_worker: StartWorker, topo: Topology, channel: AbstractChannel, tmp_path: Path, n: int
) -> None:
    worker = start_worker(config=CONFIG)
    await worker.wait_ready()
    jobs = typical_jobs(n, "e2e")
    await send_and_collect(channel, topo, jobs)

    code, report = await rerender(tmp_path, "local", topo, "--config", str(CONFIG))
    assert code == 0
    assert report["archive"]["records"] == n
    assert report["archive"]["duplicates"] == [] and report["archive"]["bad"] == 0
    assert report["totals"]["drift"] == {"same": n, "changed": 0, "error": 0}

    # A template edit: the jobs whose prompts hold the edited sentence change, no other.
    out = tmp_path / "edited.jsonl"
    assert await asyncio.to_thread(rerender_edited, out, topo) == 0
    records = await asyncio.to_thread(read_jsonl, out)
    spool = await asyncio.to_thread(read_jsonl, f"{out}.archive.jsonl")
    assert [s["job"]["job_id"] for s in spool] == [r["job_id"] for r in records]
    holds_sentence = {
        s["job"]["job_id"] for s in spool if any(EDIT_BEFORE in m["content"] for m in s["messages"])
    }
    assert holds_sentence, "the typical jobs hold the edited sentence"
    changed = {r["job_id"] for r in records if r["drift"] == "changed"}
    assert changed == holds_sentence
    assert {r["drift"] for r in records if r["job_id"] not in changed} == {"same"}

    # The fleet renders them again, through the same serve: the same. (Its jobs are
    # recorded too, after the end offset this run reads to.)
    code, report = await rerender(
        tmp_path, "fleet", topo, f"--broker={AMQP_URL}", "--request-queue", topo.request_queue
    )
    assert code == 0
    assert report["archive"]["records"] == n
    assert report["totals"]["drift"] == {"same": n, "changed": 0, "error": 0}


async def test_typical_jobs_through_serve_rerender_from_the_archive(
    start_worker: StartWorker, topo: Topology, channel: AbstractChannel, tmp_path: Path
) -> None:
    await through_serve_and_back(start_worker, topo, channel, tmp_path, 200)


@pytest.mark.slow
@pytest.mark.timeout(3600)
async def test_ten_thousand_typical_jobs_through_serve_rerender_from_the_archive(
    start_worker: StartWorker, topo: Topology, channel: AbstractChannel, tmp_path: Path
) -> None:
    await through_serve_and_back(start_worker, topo, channel, tmp_path, 10_000)


async def test_every_acknowledged_job_is_rerendered_across_a_sigkill_and_duplicates_flagged(
    start_worker: StartWorker, topo: Topology, channel: AbstractChannel, tmp_path: Path
) -> None:
    worker = start_worker("--prefetch", "32", config=CONFIG)
    await worker.wait_ready()
    jobs = typical_jobs(400, "kill")

    async def kill() -> None:
        worker.signal(signal.SIGKILL)
        await worker.wait_exit()
        successor = start_worker("--prefetch", "32", config=CONFIG)
        await successor.wait_ready()

    await send_and_collect(channel, topo, jobs, kill=kill)
    code, report = await rerender(tmp_path, "after-kill", topo, "--config", str(CONFIG))
    assert code == 0
    archive = report["archive"]
    spool = await asyncio.to_thread(read_jsonl, tmp_path / "after-kill.jsonl.archive.jsonl")
    recorded = [s["job"]["job_id"] for s in spool]
    assert set(recorded) == {job["job_id"] for job in jobs}
    # Every record past a job's first is flagged, in the spool and in the report.
    assert len(archive["duplicates"]) == len(recorded) - len(jobs)
    flagged = {d["line"] for d in archive["duplicates"]}
    assert flagged == {n for n, s in enumerate(spool, 1) if "duplicate_of_line" in s["archive"]}
    assert report["totals"]["drift"] == {"same": len(recorded), "changed": 0, "error": 0}


async def test_a_credential_in_a_job_never_reaches_the_fleet_page(
    start_worker: StartWorker, topo: Topology, channel: AbstractChannel, tmp_path: Path
) -> None:
    worker = start_worker()
    await worker.wait_ready()
    text, secrets = secret_text()
    jobs = [a_job("with-secrets", alert_data=text), a_job("plain")]
    await send_and_collect(channel, topo, jobs)
    page = tmp_path / "fleet.html"
    result = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "worker", "report", "--from-archive", AMQP_URL,
         "--archive-stream", archive_stream(topo), "--since", "1h", "--html", str(page),
         "--progress", "off"],
        cwd=REPO, capture_output=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    html = await asyncio.to_thread(page.read_text, encoding="utf-8")
    assert "with-secrets" in html
    for secret in secrets:
        # As written, and as the page's JSON escapes would spell it.
        assert secret not in html
        assert json.dumps(secret)[1:-1] not in html
