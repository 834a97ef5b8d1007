"""Archive streams for the reading tests: declared per test, filled with records in the
wire format of SPEC §12 (what serve's recorder writes), deleted afterwards."""

import asyncio
import datetime
import gzip
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import aiormq
import orjson
import zstandard

from tests.unavailable import AMQP_URL
from worker.archive.record import RecordFacts, record_json, session_id_of

RECORD_TYPE = "build-prompt.archive-record"


def record_of(case: dict[str, Any], at: float | None = None, **meta: Any) -> dict[str, Any]:
    """The record serve writes (worker/archive/record.py builds it) for a case of the
    conformance files: the job and what was sent for it."""
    from tests.rerender.runs import sent_meta

    job = case["job"]
    messages: list[dict[str, str]] = case.get("expected_messages") or case["messages"]
    reply = {
        "job_id": job.get("job_id"),
        "status": "ok",
        "kind": job.get("kind"),
        "messages": messages,
        "meta": {
            **sent_meta(case),
            "prompt_chars": sum(len(m["content"]) for m in messages),
            "masked": {},
            "warnings": [],
            **meta,
        },
    }
    facts = RecordFacts(job=job, kind=job.get("kind"), session_id=session_id_of(job))
    body = record_json(facts, orjson.dumps(reply), at or time.time(), "0.1.0")
    record: dict[str, Any] = orjson.loads(body)
    return record


def encode(record: dict[str, Any] | bytes, encoding: str) -> bytes:
    body = record if isinstance(record, bytes) else orjson.dumps(record)
    if encoding == "zstd":
        return zstandard.ZstdCompressor().compress(body)
    if encoding == "gzip":
        return gzip.compress(body)
    return body


async def publish(
    stream: str,
    records: Sequence[dict[str, Any] | bytes],
    *,
    encoding: str = "zstd",
    url: str = AMQP_URL,
    when: datetime.datetime | None = None,
    compress: bool = True,
) -> None:
    """Publish `records` (a record, or a body's bytes) with `encoding` as the
    content_encoding; `compress=False` sends bytes as they are, whatever it says."""
    connection = await aiormq.connect(url)
    try:
        channel = await connection.channel()
        await channel.confirm_delivery()
        for record in records:
            job = record.get("job", {}) if isinstance(record, dict) else {}
            headers = {
                "record": 1,
                "kind": job.get("kind"),
                "session_id": (job.get("session") or {}).get("session_id"),
            }
            await channel.basic_publish(
                encode(record, encoding if compress else ""),
                routing_key=stream,
                properties=aiormq.spec.Basic.Properties(
                    content_type="application/json",
                    content_encoding=encoding or None,
                    timestamp=when or datetime.datetime.now(datetime.UTC),
                    message_id=job.get("job_id"),
                    message_type=RECORD_TYPE,
                    headers={k: v for k, v in headers.items() if v is not None},
                    delivery_mode=2,
                ),
            )
    finally:
        await connection.close()


async def _declare(stream: str, url: str, *, delete: bool) -> None:
    connection = await aiormq.connect(url)
    try:
        channel = await connection.channel()
        if delete:
            await channel.queue_delete(stream)
        else:
            await channel.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    finally:
        await connection.close()


@contextmanager
def archive_stream(label: str, url: str = AMQP_URL) -> Iterator[str]:
    """A fresh stream of this test's, deleted when it ends."""
    name = f"archive-read.{label}.{uuid.uuid4().hex[:8]}"
    asyncio.run(_declare(name, url, delete=False))
    try:
        yield name
    finally:
        asyncio.run(_declare(name, url, delete=True))


def error_record_of(job: dict[str, Any], code: str, message: str) -> dict[str, Any]:
    """The record of a job answered with an error."""
    reply = {
        "job_id": job.get("job_id"),
        "status": "error",
        "kind": job.get("kind"),
        "error": {"code": code, "message": message},
    }
    facts = RecordFacts(job=job, kind=job.get("kind"), session_id=session_id_of(job))
    record: dict[str, Any] = orjson.loads(
        record_json(facts, orjson.dumps(reply), time.time(), "0.1.0")
    )
    return record
