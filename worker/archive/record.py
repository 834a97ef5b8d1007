"""One archive record: its wire format, built from what the worker already holds.

A record is one AMQP message on the archive stream per answered job (SPEC §12,
CONTRACT.md "The archive"). Its body is a zstd-compressed UTF-8 JSON object:

    {"record": 1, "answered_at": "2026-11-29T09:40:00.123Z", "worker_version": "0.1.0",
     "job": {...the job as rendered: after masking...} | null,
     ...every member of the reply as the caller got it: "job_id", "status", "kind",
     and "messages" + "meta" (status "ok") or "error" (status "error")}

`job` is null when there was no job to keep: a body that is not JSON, too large to be
read, or one masking could not finish (its text never reaches the archive). The reply's
members are the reply's very bytes (no second encoding), so a record says exactly what
was sent.

Properties: `content_type` application/json, `content_encoding` zstd, `timestamp` the
answer time (whole seconds), `message_id` the job's id (a random hex id
when the job had none),
`delivery_mode` 2, `type` build-prompt.archive-record, `app_id` prompt-worker. Headers
(a header whose value is absent is left out) let a reader filter without decompressing:
`record` (the version), `kind`, `family`, `session_id`, `status`.
"""

import asyncio
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
import zstandard
from pamqp.commands import Basic

# The version of the record's layout: a reader refuses a record of a newer one.
RECORD_VERSION = 1
DEFAULT_STREAM = "build-prompt.archive"
CONTENT_TYPE = "application/json"
CONTENT_ENCODING = "zstd"
MESSAGE_TYPE = "build-prompt.archive-record"
APP_ID = "prompt-worker"
# zstd level 1: the fastest of the levels that compress JSON well (docs/ARCHIVE.md,
# "Retention and sizes"); higher levels cost CPU per job for a few percent of bytes.
ZSTD_LEVEL = 1
# Records larger than this (uncompressed) are compressed off the event loop: a thread
# costs ~50 µs, worth it only where zstd itself takes a millisecond or more.
COMPRESS_IN_THREAD_ABOVE = 1 << 20

HEADER_RECORD = "record"
HEADER_KIND = "kind"
HEADER_FAMILY = "family"
HEADER_SESSION_ID = "session_id"
HEADER_STATUS = "status"
HEADERS = (HEADER_RECORD, HEADER_KIND, HEADER_FAMILY, HEADER_SESSION_ID, HEADER_STATUS)


@dataclass(frozen=True, slots=True)
class RecordFacts:
    """What a record says of its job besides the reply: the masked job and its labels."""

    job: Any  # the parsed job after masking (a JSON value), None when there is none
    # The job's `tools` as raw JSON, when the decoder cut a known catalogue out of the
    # body (then `job` holds no `tools`): put back as they were spelt, never re-encoded.
    tools_json: bytes | None = None
    kind: str | None = None
    family: str | None = None
    session_id: str | None = None


def session_id_of(job: Any) -> str | None:
    """`session.session_id` of a parsed job, if it is a string."""
    if type(job) is not dict:
        return None
    session = job.get("session")
    value = session.get("session_id") if type(session) is dict else None
    return value if type(value) is str and value else None


def answered_at_text(when: float) -> str:
    """RFC 3339 in UTC with milliseconds, e.g. 2026-11-29T09:40:00.123Z."""
    stamp = datetime.fromtimestamp(when, UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


def job_json(facts: RecordFacts) -> bytes:
    """The masked job as JSON (`null` when there is none or it cannot be written)."""
    job = facts.job
    if job is None:
        return b"null"
    if facts.tools_json is not None and type(job) is dict:
        job = {**job, "tools": orjson.Fragment(facts.tools_json)}
    try:
        return orjson.dumps(job)
    except orjson.JSONEncodeError:
        pass
    # Integers beyond 64 bits (kept exact for the families with Python semantics) or
    # nesting beyond orjson's limit: the standard library writes what it parsed.
    if facts.tools_json is not None and type(job) is dict:
        job = {**job, "tools": json.loads(facts.tools_json)}
    try:
        return json.dumps(job, ensure_ascii=False, separators=(",", ":")).encode()
    except (ValueError, RecursionError):
        return b"null"


def record_json(facts: RecordFacts, reply: bytes, answered_at: float, worker_version: str) -> bytes:
    """The record's uncompressed JSON: its own members, then the reply's, reused as sent.

    `reply` is a JSON object as the worker published it (orjson's output: `{` first)."""
    head = orjson.dumps(
        {
            "record": RECORD_VERSION,
            "answered_at": answered_at_text(answered_at),
            "worker_version": worker_version,
        }
    )
    return b"".join((head[:-1], b',"job":', job_json(facts), b",", reply[1:]))


def record_headers(facts: RecordFacts, status: str) -> dict[str, Any]:
    """The headers a reader filters on; one whose value is absent is left out."""
    headers: dict[str, Any] = {HEADER_RECORD: RECORD_VERSION}
    if facts.kind:
        headers[HEADER_KIND] = facts.kind
    if facts.family:
        headers[HEADER_FAMILY] = facts.family
    if facts.session_id:
        headers[HEADER_SESSION_ID] = facts.session_id
    headers[HEADER_STATUS] = status
    return headers


class RecordCompressor:
    """zstd at `ZSTD_LEVEL` with one reused context (not thread-safe: one per loop)."""

    def __init__(self, level: int = ZSTD_LEVEL) -> None:
        self.level = level
        self._compressor = zstandard.ZstdCompressor(level=level)

    def compress(self, data: bytes) -> bytes:
        return self._compressor.compress(data)

    async def compress_async(self, data: bytes) -> bytes:
        """`compress(data)`, in a worker thread when `data` is large: zstd takes tens of
        milliseconds on a record of tens of MB, which every other job's reply and
        acknowledgement would wait for on the event loop (zstandard lets go of the GIL
        while it compresses)."""
        if len(data) <= COMPRESS_IN_THREAD_ABOVE:
            return self._compressor.compress(data)
        # A context of its own: the reused one is not thread-safe.
        return await asyncio.to_thread(zstandard.ZstdCompressor(level=self.level).compress, data)


def decompress_record(body: bytes) -> bytes:
    """A record's JSON from its body (for tests and tools; readers have their own)."""
    return zstandard.ZstdDecompressor().decompress(body)


def record_properties(
    facts: RecordFacts, status: str, job_id: str | None, answered_at: float
) -> Basic.Properties:
    """The AMQP properties of a record: its encoding, its answer time (whole seconds, as
    AMQP's timestamp holds them), the job's id and the headers readers filter on."""
    return Basic.Properties(
        content_type=CONTENT_TYPE,
        content_encoding=CONTENT_ENCODING,
        delivery_mode=2,
        timestamp=datetime.fromtimestamp(int(answered_at), UTC),
        message_id=job_id,
        message_type=MESSAGE_TYPE,
        app_id=APP_ID,
        headers=record_headers(facts, status),
    )
