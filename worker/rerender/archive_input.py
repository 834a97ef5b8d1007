"""rerender's input from the archive stream: the window's records, spooled to a file.

The records of the window are written, in stream order, to `OUTPUT.archive.jsonl`
beside the output: one record a line, each the `{job, messages, meta}` wrapper a
rerender input file holds (SPEC §7), plus `archive` (its stream offset, and the line of
the job's first record when this one is a duplicate). The run then renders that file
as any other input, so drift, the report, the page and `--resume` are the file's.
`OUTPUT.archive.json` keeps the read's state: the window, the offset the run reads to
(the stream's end when it started), the records it could not read, whether the read is
complete. An interrupted read resumes after the last offset in the spool.
"""

import asyncio
import datetime
import os
import ssl
from collections.abc import Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TextIO

import orjson
from aiormq.abc import AbstractConnection

from worker.archive.decode import BadRecord, NewerRecord, decode_record
from worker.archive.read_window import Window
from worker.archive.reading import ArchiveReader, Delivery
from worker.rerender.progress import Progress, make_progress
from worker.transport.link.addresses import open_first

SPOOL_SUFFIX = ".archive.jsonl"
STATE_SUFFIX = ".archive.json"
# Bad records are listed by offset in the state and the report up to this many.
MAX_BAD_LISTED = 100
# The read's state is saved every this many stream offsets (and at its end).
SAVE_EVERY = 1000


class ArchiveReadError(Exception):
    """The archive cannot be read to the end (one line; what was read is kept)."""


@dataclass(frozen=True, slots=True)
class ArchiveSource:
    # The broker's addresses (a cluster's nodes), tried in order until one answers.
    urls: tuple[str, ...]
    stream: str
    window: Window
    # host:port (of each address), for the state and the report: never credentials.
    where: str
    # For amqps://: the context of the --tls-* files (or PROMPT_WORKER_TLS_* variables).
    ssl_context: ssl.SSLContext | None = None

    async def connect(self) -> AbstractConnection:
        """A connection to the first of the addresses that answers."""
        return await open_first(self.urls, lambda _url: self.ssl_context)


@dataclass(slots=True)
class ReadState:
    """What the spool holds and how far the read got (the report's `archive` section)."""

    stream: str
    broker: str
    window: dict[str, Any]
    end_offset: int | None = None
    records: int = 0
    bad: int = 0
    # Records of jobs the worker could not read (`job` null): answered, not renderable.
    no_job: int = 0
    bad_records: list[dict[str, Any]] = field(default_factory=list)
    duplicates: list[dict[str, Any]] = field(default_factory=list)
    complete: bool = False
    last_offset: int | None = None

    def note_bad(self, offset: int, reason: str) -> None:
        self.bad += 1
        if len(self.bad_records) < MAX_BAD_LISTED:
            self.bad_records.append({"offset": offset, "reason": reason})

    def as_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ReadState":
        return cls(**{name: data[name] for name in cls.__slots__ if name in data})


def spool_path(output: str) -> Path:
    return Path(output + SPOOL_SUFFIX)


def _state_path(output: str) -> Path:
    return Path(output + STATE_SUFFIX)


def _job_id(record: dict[str, Any]) -> str | None:
    job_id = record.get("job_id") or (record.get("job") or {}).get("job_id")
    return job_id if isinstance(job_id, str) else None


class Spool:
    """The spool file and its state, appended a record at a time."""

    def __init__(self, output: str, state: ReadState) -> None:
        self.path = spool_path(output)
        self.state_path = _state_path(output)
        self.state = state
        self.first_line: dict[str, int] = {}
        self._file = open(self.path, "ab")  # noqa: SIM115 -- closed by close()

    def rescan(self) -> None:
        """Resume: cut a torn last line, and learn which jobs the spool holds."""
        data = self.path.read_bytes()
        whole = data.rfind(b"\n") + 1
        if whole < len(data):
            os.truncate(self.path, whole)
        lines = data[:whole].splitlines()
        for number, line in enumerate(lines, 1):
            record = orjson.loads(line)
            job_id = _job_id(record)
            if job_id is not None:
                self.first_line.setdefault(job_id, number)
            self.state.last_offset = record["archive"]["offset"]
        self.state.records = len(lines)
        last = self.state.last_offset if self.state.last_offset is not None else -1
        self.state.bad_records = [b for b in self.state.bad_records if b["offset"] <= last]
        self.state.duplicates = [d for d in self.state.duplicates if d["offset"] <= last]
        self.state.bad = len(self.state.bad_records)

    def add(self, record: dict[str, Any], delivery: Delivery) -> None:
        if record.get("job") is None:
            self.state.no_job += 1
            return
        self.state.records += 1
        line = self.state.records
        archive: dict[str, Any] = {"offset": delivery.offset}
        job_id = _job_id(record) or delivery.message_id
        if job_id is not None:
            first = self.first_line.setdefault(job_id, line)
            if first != line:
                archive["duplicate_of_line"] = first
                self.state.duplicates.append(
                    {"line": line, "offset": delivery.offset, "job_id": job_id, "first_line": first}
                )
        # `job` first: the line reads as a wrapper at a glance (rerender/local.py).
        self._file.write(orjson.dumps({"job": record["job"], **record, "archive": archive}) + b"\n")
        self.state.last_offset = delivery.offset

    def bad(self, delivery: Delivery, reason: str) -> None:
        self.state.note_bad(delivery.offset, reason)

    def save(self) -> None:
        self._file.flush()
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_bytes(orjson.dumps(self.state.as_json(), option=orjson.OPT_INDENT_2))
        tmp.replace(self.state_path)

    def close(self) -> None:
        self.save()
        self._file.close()


def open_spool(source: ArchiveSource, output: str, *, resume: bool) -> tuple[Spool, bool]:
    """The spool, fresh or (with `resume` and a read on record) continued; and whether
    its state came from the earlier read (its window and end offset then stand)."""
    state_path = _state_path(output)
    if resume and state_path.exists() and spool_path(output).exists():
        state = ReadState.from_json(orjson.loads(state_path.read_bytes()))
        spool = Spool(output, state)
        spool.rescan()
        return spool, True
    spool_path(output).write_bytes(b"")
    state = ReadState(stream=source.stream, broker=source.where, window=source.window.describe())
    return Spool(output, state), False


@dataclass(slots=True)
class _Bar:
    """The read's progress, by stream offset, once the first offset is known."""

    make: Callable[[int, int], Progress]
    progress: Progress | None = None
    first: int = 0

    def update(self, delivery: Delivery, state: ReadState) -> None:
        if self.progress is None:
            self.first = delivery.offset
            end = state.end_offset if state.end_offset is not None else delivery.offset
            self.progress = self.make(end - self.first + 1, 0)
        self.progress.update(
            jobs=state.records, offset=delivery.offset - self.first + 1, errors=state.bad, changed=0
        )

    def close(self) -> None:
        if self.progress is not None:
            self.progress.close()


class RecordSink(Protocol):
    """Where the records of a read go: the spool (rerender) or the fleet page (report)."""

    state: ReadState

    def add(self, record: dict[str, Any], delivery: Delivery) -> None: ...

    def bad(self, delivery: Delivery, reason: str) -> None: ...

    def save(self) -> None: ...


async def _read(source: ArchiveSource, spool: RecordSink, bar: _Bar) -> None:
    state, window = spool.state, source.window
    async with ArchiveReader(source.connect, source.stream) as reader:
        if state.end_offset is None:
            end = await reader.find_end()
            if end is None or (window.before(end.timestamp)):
                state.complete = True  # nothing in the window
                return
            state.end_offset = end.offset
            spool.save()
        start: int | datetime.datetime = (
            state.last_offset + 1 if state.last_offset is not None else window.since
        )
        if isinstance(start, int) and start > state.end_offset:
            state.complete = True
            return
        # Closed here, not when collected: its consumer is cancelled before the loop ends.
        async with aclosing(reader.read(start, state.end_offset)) as deliveries:
            async for delivery in deliveries:
                if window.after(delivery.timestamp):
                    break
                _take(delivery, window, spool)
                bar.update(delivery, state)
                if delivery.offset % SAVE_EVERY == 0:
                    spool.save()
    state.complete = True


def _take(delivery: Delivery, window: Window, spool: RecordSink) -> None:
    if window.before(delivery.timestamp) or window.excludes_headers(delivery.headers):
        return
    try:
        record = decode_record(delivery.body, delivery.encoding)
    except BadRecord as exc:
        spool.bad(delivery, str(exc))
        return
    except NewerRecord as exc:
        raise ArchiveReadError(f"offset {delivery.offset}: {exc}") from None
    if window.admits(record):
        spool.add(record, delivery)


def read_archive(
    source: ArchiveSource,
    output: str,
    *,
    resume: bool,
    progress_mode: str,
    log_interval: float,
    err: TextIO,
) -> ReadState:
    """Spool the window's records (see the module); raises ArchiveReadError or
    ArchiveError with what was read kept, KeyboardInterrupt likewise."""
    spool, resumed = open_spool(source, output, resume=resume)
    if resumed and spool.state.complete:
        spool.close()
        return spool.state
    try:
        read_into(source, spool, progress_mode=progress_mode, log_interval=log_interval, err=err)
    finally:
        spool.close()
    return spool.state


def read_into(
    source: ArchiveSource,
    sink: RecordSink,
    *,
    progress_mode: str,
    log_interval: float,
    err: TextIO,
) -> None:
    """Read the window's records (from `sink.state.last_offset` on, if set) into `sink`,
    with a progress bar by stream offset."""

    def make(total: int, start: int) -> Progress:
        return make_progress(
            progress_mode,
            total_bytes=total,
            start_offset=start,
            interval=log_interval,
            stream=err,
            label="archive",
        )

    bar = _Bar(make)
    try:
        asyncio.run(_read(source, sink, bar))
    finally:
        bar.close()
    if sink.state.bad:
        err.write(
            f"{sink.state.bad:,} archive records could not be read"
            " (listed by offset: the rerender report's archive.bad_records, the fleet page's notes)\n"
        )
