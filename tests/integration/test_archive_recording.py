"""The archive (SPEC §12, docs/ARCHIVE.md), through a real worker and RabbitMQ.

Every job `serve` answered, ok or error, has a record on the test's own stream: the wire
format of worker/archive/record.py, decompressed and checked against the reply the
client got, with the job as it was rendered (masked: no credential of the masking
corpus reaches the record, its body or its headers). A stream deleted mid-run, refused,
or a broker that does not confirm: the replies still arrive, nothing is dead-lettered,
and the counter and /readyz say what happened. A worker killed mid-run: every job
answered and acknowledged has a record (duplicates allowed).
"""

import json
from pathlib import Path
from typing import Any

import aio_pika
import orjson
import pytest
import yaml
from aio_pika.abc import AbstractChannel

from tests.integration.archive_records import read_records
from tests.integration.helpers import (
    AMQP_URL,
    StartWorker,
    a_job,
    archive_stream,
    metric_value,
    queue_depth,
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
    assert strip_stream_headers(badr.message.headers) == {
        "record": 1,
        "kind": "react",
        "status": "error",
    }
    assert by_id[None].record["job"] is None
    # Without a job id, the message id is a random one (returns are matched by it).
    assert len(by_id[None].message.message_id or "") == 32

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
    }
    # Only the error replies' jobs were dead-lettered.
    assert await queue_depth(channel, topo.dead_letter) == 2
