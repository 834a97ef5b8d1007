"""The archive record's wire format (worker.archive.record): expected bytes written out."""

import asyncio
import os
from collections.abc import Awaitable

import zstandard

from schemas.archive import ErrorRecord, OkRecord, parse_record
from worker.archive.record import (
    COMPRESS_IN_THREAD_ABOVE,
    RecordCompressor,
    RecordFacts,
    answered_at_text,
    decompress_record,
    job_json,
    record_headers,
    record_json,
    session_id_of,
)

# 2026-11-29T09:40:00.123Z
ANSWERED = 1795945200.123


def test_answered_at_is_rfc3339_utc_with_milliseconds() -> None:
    assert answered_at_text(ANSWERED) == "2026-11-29T09:40:00.123Z"
    assert answered_at_text(0.0) == "1970-01-01T00:00:00.000Z"


def test_an_ok_record_holds_the_job_then_the_reply_members_as_sent() -> None:
    facts = RecordFacts(job={"job_id": "j1", "kind": "legacy_task"}, kind="legacy_task")
    reply = b'{"job_id":"j1","status":"ok","kind":"legacy_task","messages":[{"role":"user","content":"hi"}],"meta":{"family":"legacy"}}'
    assert record_json(facts, reply, ANSWERED, "0.1.0") == (
        b'{"record":1,"answered_at":"2026-11-29T09:40:00.123Z","worker_version":"0.1.0",'
        b'"job":{"job_id":"j1","kind":"legacy_task"},'
        b'"job_id":"j1","status":"ok","kind":"legacy_task",'
        b'"messages":[{"role":"user","content":"hi"}],"meta":{"family":"legacy"}}'
    )


def test_an_error_record_without_a_job_says_null() -> None:
    reply = b'{"job_id":null,"status":"error","kind":null,"error":{"code":"invalid_json","message":"m","details":[]}}'
    assert record_json(RecordFacts(job=None), reply, ANSWERED, "9") == (
        b'{"record":1,"answered_at":"2026-11-29T09:40:00.123Z","worker_version":"9",'
        b'"job":null,"job_id":null,"status":"error","kind":null,'
        b'"error":{"code":"invalid_json","message":"m","details":[]}}'
    )


def test_a_cut_out_catalogue_is_put_back_as_spelt() -> None:
    facts = RecordFacts(job={"job_id": "j"}, tools_json=b'[{"name": "t"}]')
    assert job_json(facts) == b'{"job_id":"j","tools":[{"name": "t"}]}'


def test_integers_beyond_64_bits_are_written_exactly() -> None:
    facts = RecordFacts(job={"n": 2**70})
    assert job_json(facts) == b'{"n":1180591620717411303424}'
    with_tools = RecordFacts(job={"n": 2**70}, tools_json=b'[{"name":"t"}]')
    assert job_json(with_tools) == b'{"n":1180591620717411303424,"tools":[{"name":"t"}]}'


def test_headers_leave_out_what_is_absent() -> None:
    full = RecordFacts(job=None, kind="k", family="f", session_id="s")
    assert record_headers(full, "ok") == {
        "record": 1,
        "kind": "k",
        "family": "f",
        "session_id": "s",
        "status": "ok",
    }
    assert record_headers(RecordFacts(job=None), "error") == {"record": 1, "status": "error"}


def test_session_id_is_read_from_the_session() -> None:
    assert session_id_of({"session": {"session_id": "abc"}}) == "abc"
    assert session_id_of({"session": {"session_id": 5}}) is None
    assert session_id_of({"session": "x"}) is None
    assert session_id_of([1]) is None


def test_compressed_records_are_zstd_frames_any_decoder_reads() -> None:
    body = RecordCompressor().compress(b'{"record":1}')
    assert body[:4] == b"\x28\xb5\x2f\xfd"  # the zstd frame's magic number
    assert zstandard.ZstdDecompressor().decompress(body) == b'{"record":1}'
    assert decompress_record(body) == b'{"record":1}'


def test_records_parse_as_the_schema_models() -> None:
    reply = (
        b'{"job_id":"j1","status":"ok","kind":"react","messages":[{"role":"user","content":"hi"}],'
        b'"meta":{"template_version":"t","family":"tarsy","worker_version":"0.1.0","render_ms":1.0,'
        b'"prompt_chars":2,"cache":{"breakpoints":[],"tokenizer":"estimate","stable_tokens":0,'
        b'"prompt_tokens":1,"cut":null}}}'
    )
    ok = parse_record(record_json(RecordFacts(job={"job_id": "j1"}), reply, ANSWERED, "0.1.0"))
    assert isinstance(ok, OkRecord)
    assert (ok.record, ok.job, ok.answered_at.isoformat()) == (
        1,
        {"job_id": "j1"},
        "2026-11-29T09:40:00.123000+00:00",
    )
    error = b'{"job_id":null,"status":"error","kind":null,"error":{"code":"invalid_json","message":"m","details":[]}}'
    bad = parse_record(record_json(RecordFacts(job=None), error, ANSWERED, "0.1.0"))
    assert isinstance(bad, ErrorRecord)
    assert bad.job is None


def test_the_default_stream_is_serves_default() -> None:
    from worker.archive.record import DEFAULT_STREAM
    from worker.transport.setting_flags import DEFAULT_ARCHIVE_STREAM

    assert DEFAULT_STREAM == DEFAULT_ARCHIVE_STREAM == "build-prompt.archive"


async def ticks_while(work: Awaitable[bytes]) -> tuple[bytes, int]:
    """`work`'s result, and how often another task of the loop ran while it was awaited."""
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0)
            ticks += 1

    running = asyncio.create_task(ticker())
    await asyncio.sleep(0)  # the ticker waits at its first sleep
    started = ticks
    try:
        result = await work
    finally:
        running.cancel()
    return result, ticks - started


async def test_a_large_record_is_compressed_off_the_event_loop() -> None:
    compressor = RecordCompressor()
    small = b'{"job":"' + b"x" * 1000 + b'"}'
    large = b'{"job":"' + os.urandom(COMPRESS_IN_THREAD_ABOVE).hex().encode() + b'"}'
    body, ticks = await ticks_while(compressor.compress_async(small))
    # A small record is compressed at once: nothing else runs meanwhile.
    assert ticks == 0 and decompress_record(body) == small
    body, ticks = await ticks_while(compressor.compress_async(large))
    # A large one in a thread: the loop goes on with its other tasks meanwhile.
    assert ticks > 0 and decompress_record(body) == large
