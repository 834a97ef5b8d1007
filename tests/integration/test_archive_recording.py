"""The archive (SPEC §12, docs/ARCHIVE.md), through a real worker and RabbitMQ.

Every job `serve` answered, ok or error, has a record on the test's own stream: the wire
format of worker/archive/record.py, decompressed and checked against the reply the
client got, with the job as it was rendered (masked: no credential of the masking
corpus reaches the record, its body or its headers). A stream deleted mid-run, refused,
or a broker that does not confirm: the replies still arrive, nothing is dead-lettered,
and the counter and /readyz say what happened. A worker killed mid-run: every job
answered and acknowledged has a record (duplicates allowed).
"""

import asyncio
import json
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aio_pika
import jsonschema
import orjson
import pytest
import yaml
from aio_pika.abc import AbstractChannel
from yarl import URL

from tests.integration.archive_records import collect_job_ids, read_records
from tests.integration.helpers import (
    AMQP_URL,
    REPO,
    StartWorker,
    TcpProxy,
    a_job,
    archive_stream,
    metric_value,
    own_vhost,
    queue_depth,
    rabbitmqctl,
    wait_for,
)
from worker.transport.link.topology import Topology
from worker.transport.producers.client import PromptClient

pytestmark = pytest.mark.broker

CORPUS = Path(__file__).resolve().parent.parent / "masking" / "corpus" / "secrets.yaml"
# Cases of the masking corpus, one text each, and the strings that must never pass.
CASES: list[dict[str, Any]] = yaml.safe_load(CORPUS.read_text(encoding="utf-8"))
LEAKY = [
    case
    for case in CASES
    if case["id"] in ("pem-rsa", "authorization-bearer-curl", "k8s-secret-yaml")
]


def secret_text() -> tuple[str, list[str]]:
    """Alert text carrying credentials, and those credentials."""
    text = "\n\n".join(case["text"] for case in LEAKY)
    return text, [secret for case in LEAKY for secret in case["secrets"]]


def strip_stream_headers(headers: dict[str, Any] | None) -> dict[str, Any]:
    """A record's headers as the worker set them (the broker adds x-stream-offset)."""
    return {k: v for k, v in (headers or {}).items() if not k.startswith("x-")}


async def test_ok_and_error_jobs_are_recorded_as_they_were_answered(
    start_worker: StartWorker, topo: Topology, client: PromptClient, channel: AbstractChannel
) -> None:
    worker = start_worker()
    await worker.wait_ready()
    text, secrets = secret_text()
    job = a_job("archived-ok", alert_data=text)
    ok = await client.build(job, timeout=60)
    assert ok["status"] == "ok"
    invalid = {
        "job_id": "archived-bad",
        "kind": "react",
        "session": {"alert_data": text},
        "stage": 5,
    }
    bad = await client.build(invalid, timeout=60)
    assert bad["status"] == "error"
    not_json = await client.build_bytes(b"{not json", timeout=60)
    assert not_json["error"]["code"] == "invalid_json"

    records = await read_records(AMQP_URL, archive_stream(topo), at_least=3)
    assert len(records) == 3
    by_id = {r.record["job_id"]: r for r in records}
    assert set(by_id) == {"archived-ok", "archived-bad", None}

    okr = by_id["archived-ok"]
    assert okr.record["record"] == 1
    assert okr.record["status"] == "ok"
    assert okr.record["messages"] == ok["messages"]
    assert okr.record["meta"] == ok["meta"]
    assert okr.record["worker_version"] == ok["meta"]["worker_version"]
    assert okr.record["answered_at"].endswith("Z")
    # The job as rendered: what was sent, but for the masked alert text.
    rendered = okr.record["job"]
    masked_alert = rendered["session"].pop("alert_data")
    sent = json.loads(json.dumps(job))
    sent["session"].pop("alert_data")
    assert rendered == sent
    assert masked_alert != text
    message = okr.message
    assert message.content_type == "application/json"
    assert message.content_encoding == "zstd"
    assert message.message_id == "archived-ok"
    assert message.type == "build-prompt.archive-record"
    assert message.app_id == "prompt-worker"
    assert message.delivery_mode == aio_pika.DeliveryMode.PERSISTENT
    assert message.timestamp is not None
    assert strip_stream_headers(message.headers) == {
        "record": 1,
        "kind": "react",
        "family": ok["meta"]["family"],
        "session_id": job["session"]["session_id"],
        "status": "ok",
    }

    badr = by_id["archived-bad"]
    assert badr.record["status"] == "error"
    assert badr.record["error"] == bad["error"]
    assert "messages" not in badr.record
    assert badr.record["job"]["job_id"] == "archived-bad"
    # An error reply names no family; the record's header does, from the job's kind.
    assert strip_stream_headers(badr.message.headers) == {
        "record": 1,
        "kind": "react",
        "family": "tarsy",
        "status": "error",
    }
    assert by_id[None].record["job"] is None
    # Without a job id, the message id is a random one (returns are matched by it).
    assert len(by_id[None].message.message_id or "") == 32

    # Each record is what its JSON Schema says (schemas/archive-record.schema.json).
    schema = json.loads((REPO / "schemas" / "archive-record.schema.json").read_text())
    for read in records:
        jsonschema.validate(read.record, schema, format_checker=jsonschema.FormatChecker())
    # No credential anywhere in the archive: bodies (compressed and not) and headers.
    for read in records:
        plain = orjson.dumps(read.record).decode()
        shown = plain + repr(read.message.headers)
        for secret in secrets:
            assert secret not in shown
            assert secret.encode() not in read.body
    exposition = await worker.metrics_showing(
        'prompt_worker_archive_records_total{outcome="written"} 3.0'
    )
    assert metric_value(exposition, 'prompt_worker_archive_records_total{outcome="timeout"}') == 0
    status, body = await worker.http_get("/readyz")
    assert status == 200
    assert orjson.loads(body)["archive"] == {
        "stream": archive_stream(topo),
        "connected": True,
        "recording": True,
        "last_problem": None,
        "lost": {},
    }
    # Only the error replies' jobs were dead-lettered.
    assert await queue_depth(channel, topo.dead_letter) == 2


# -- faults: none may cost a job --------------------------------------------------------


async def answer_all(client: PromptClient, prefix: str, count: int) -> list[dict[str, Any]]:
    jobs = [client.build(a_job(f"{prefix}-{i}"), timeout=60) for i in range(count)]
    replies = await asyncio.gather(*jobs)
    assert [reply["status"] for reply in replies] == ["ok"] * count
    return replies


async def archive_status(worker: Any) -> dict[str, Any]:
    status, body = await worker.http_get("/readyz")
    assert status == 200  # the archive never makes the worker unready
    archive: dict[str, Any] = orjson.loads(body)["archive"]
    return archive


async def test_a_stream_deleted_mid_run_costs_no_job_and_is_declared_again(
    start_worker: StartWorker, topo: Topology, client: PromptClient, channel: AbstractChannel
) -> None:
    worker = start_worker()
    await worker.wait_ready()
    await answer_all(client, "before", 5)
    await worker.metrics_showing('prompt_worker_archive_records_total{outcome="written"} 5.0')
    await channel.queue_delete(archive_stream(topo))
    await answer_all(client, "after", 5)
    # The first record after the deletion was returned (the reply went out before its
    # record: the count comes a moment after the caller's answer); the stream is
    # declared again.
    await worker.metric_at_least('prompt_worker_archive_records_total{outcome="unroutable"}', 1)
    assert (await archive_status(worker))["lost"]["unroutable"] >= 1
    lost = next(e for e in worker.log_events() if e.get("event") == "archive_record_lost")
    assert lost["outcome"] == "unroutable"

    async def recording_again() -> bool:
        await answer_all(client, f"again-{uuid.uuid4().hex[:6]}", 1)
        return (await archive_status(worker))["last_problem"] is None

    await wait_for(recording_again, 60, "records written again after the stream came back")
    assert await queue_depth(channel, topo.dead_letter) == 0
    assert await queue_depth(channel, topo.request_queue) == 0


@pytest.fixture
def limited_user() -> Iterator[tuple[str, str]]:
    """A vhost of the test's own and a user who may use anything there but declare the
    archive stream (the configure permission leaves it out): (AMQP URL, user)."""
    with own_vhost("test-archive") as vhost_url:
        vhost = URL(vhost_url).path.lstrip("/")
        user = f"archive-{uuid.uuid4().hex[:8]}"
        rabbitmqctl("add_user", user, "secret-pass")
        try:
            rabbitmqctl("set_permissions", "-p", vhost, user, "^(?!.*archive).*$", ".*", ".*")
            url = URL(vhost_url).with_user(user).with_password("secret-pass")
            yield str(url), user
        finally:
            rabbitmqctl("delete_user", user)


async def test_a_stream_the_user_may_not_declare_costs_no_job(
    start_worker: StartWorker, topo: Topology, limited_user: tuple[str, str]
) -> None:
    url, _ = limited_user
    worker = start_worker(amqp_url=url)
    await worker.wait_ready()
    async with PromptClient(url, request_queue=topo.request_queue) as client:
        await answer_all(client, "refused", 10)
    exposition = await worker.metrics_showing(
        'prompt_worker_archive_records_total{outcome="unroutable"} 10.0'
    )
    assert metric_value(exposition, 'prompt_worker_archive_records_total{outcome="written"}') == 0
    status = await archive_status(worker)
    assert status["lost"] == {"unroutable": 10}
    assert status["last_problem"] == "unroutable"
    names = [e["event"] for e in worker.log_events()]
    # Each cause once: the refused declaration, and the records returned for want of it.
    assert names.count("archive_record_lost") == 1
    assert 1 <= names.count("archive_stream_not_declared") <= 1
    assert "ACCESS_REFUSED" in next(
        e["error"] for e in worker.log_events() if e["event"] == "archive_stream_not_declared"
    )
    connection = await aio_pika.connect(url)
    async with connection:
        probe = await connection.channel()
        assert await queue_depth(probe, topo.dead_letter) == 0
        assert await queue_depth(probe, topo.request_queue) == 0


class ArchiveStall(TcpProxy):
    """A forwarder to the broker that can stall the worker's archive connection alone
    (recognised by its name in the AMQP handshake): a broker that does not confirm."""

    def __init__(self) -> None:
        super().__init__()
        self.flowing = asyncio.Event()
        self.flowing.set()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        broker_r, broker_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        archive = asyncio.Event()  # set once the handshake named the archive
        writers = (client_w, broker_w)

        async def pipe(
            reader: asyncio.StreamReader, writer: asyncio.StreamWriter, upstream: bool
        ) -> None:
            seen = 0
            try:
                while data := await reader.read(65536):
                    if upstream and seen < 4096:
                        seen += len(data)
                        if b" archive" in data:
                            archive.set()
                    if archive.is_set():
                        await self.flowing.wait()
                    writer.write(data)
                    await writer.drain()
            finally:
                writer.transport.abort()

        await asyncio.gather(
            pipe(client_r, broker_w, True), pipe(broker_r, client_w, False), return_exceptions=True
        )
        for writer in writers:
            writer.transport.abort()


async def test_a_broker_that_does_not_confirm_records_costs_no_job(
    start_worker: StartWorker, topo: Topology, client: PromptClient, channel: AbstractChannel
) -> None:
    proxy = ArchiveStall()
    await proxy.start()
    try:
        worker = start_worker("--archive-confirm-timeout", "0.5", amqp_url=proxy.url)
        await worker.wait_ready()
        await answer_all(client, "confirmed", 3)
        await worker.metrics_showing('prompt_worker_archive_records_total{outcome="written"} 3.0')
        proxy.flowing.clear()
        await answer_all(client, "stalled", 6)
        exposition = await worker.metrics_showing(
            'prompt_worker_archive_records_total{outcome="timeout"} 6.0'
        )
        assert (
            metric_value(exposition, 'prompt_worker_jobs_total{code="",kind="react",status="ok"}')
            == 9
        )
        status = await archive_status(worker)
        assert status["lost"] == {"timeout": 6}
        assert status["last_problem"] == "timeout"
        assert await queue_depth(channel, topo.dead_letter) == 0
        assert await queue_depth(channel, topo.request_queue) == 0
        proxy.flowing.set()
    finally:
        await proxy.stop()


KILL_JOBS = 400
KILL_AFTER = 100


async def test_every_acknowledged_job_has_a_record_across_a_sigkill(
    start_worker: StartWorker, topo: Topology, channel: AbstractChannel
) -> None:
    """Jobs go to the default reply queue; the worker is killed mid-run, another takes
    over. A job is acknowledged only after its record is confirmed (or its wait is
    over), so every job, answered once or twice, has at least one record."""
    worker = start_worker("--prefetch", "32")
    await worker.wait_ready()
    ids = [f"kill-{i}" for i in range(KILL_JOBS)]
    for job_id in ids:
        await channel.default_exchange.publish(
            aio_pika.Message(orjson.dumps(a_job(job_id)), delivery_mode=2),
            routing_key=topo.request_queue,
        )
    answered = await collect_job_ids(channel, topo.reply_queue)

    async def some_answered() -> bool:
        return len(answered) >= KILL_AFTER

    await wait_for(some_answered, 120, f"{KILL_AFTER} replies before the kill")
    worker.signal(signal.SIGKILL)
    await worker.wait_exit()
    successor = start_worker("--prefetch", "32")
    await successor.wait_ready()

    async def all_answered() -> bool:
        return set(answered) == set(ids)

    await wait_for(all_answered, 180, "every job answered after the kill")

    async def all_settled() -> bool:
        return await queue_depth(channel, topo.request_queue) == 0

    await wait_for(all_settled, 60, "the request queue empty")
    records = await read_records(AMQP_URL, archive_stream(topo), at_least=KILL_JOBS, within=60)
    recorded = [r.record["job_id"] for r in records]
    assert set(recorded) == set(ids)
    # Each record is the reply that job got (a job answered twice has two, alike).
    assert all(r.record["status"] == "ok" and r.record["messages"] for r in records)
    assert await queue_depth(channel, topo.dead_letter) == 0
