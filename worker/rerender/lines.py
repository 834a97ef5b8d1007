"""The input side: whole lines in blocks, and what one line holds.

An input line is a job, or `{"job": {...}, "messages": [...]}` where `messages` (or its
synonym `expected_messages`, the conformance files' spelling) is what was sent before.

Two ways to cut the input into blocks of lines, neither holding more than one block:
  * `LineReader.blocks()` reads the stream here (stdin, pipes, the broker engine);
  * `byte_ranges()` + `read_range()` for a regular file: the process that renders a
    block reads it itself, so the process handing out the work never touches the
    bytes. A range owns the lines that *start* in it; the last one may run past its
    end (the usual way to split text files at arbitrary offsets).
"""

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

import orjson

from schemas.codes import ErrorCode
from schemas.job import KIND_ALIASES, Kind
from worker.render.json_words import json_error_words

BLOCK_BYTES = 1 << 20
PRIOR_KEYS = ("messages", "expected_messages")
_KINDS = frozenset(kind.value for kind in Kind)
_SCAN_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class Block:
    """Whole input lines, and the input offset just after them (progress and ETA)."""

    data: bytes
    end_offset: int


class LineReader:
    """Cuts a byte stream into blocks of whole lines."""

    def __init__(self, stream: BinaryIO, block_bytes: int = BLOCK_BYTES) -> None:
        self._stream = stream
        self._block_bytes = block_bytes
        self._carry = b""
        self._eof = False
        # Input bytes handed out (or skipped) so far.
        self.offset = 0

    def _read(self) -> bool:
        """Append one read to the carry; False at end of input."""
        if self._eof:
            return False
        more = self._stream.read(self._block_bytes)
        if not more:
            self._eof = True
            return False
        self._carry = self._carry + more if self._carry else more
        return True

    def skip(self, count: int) -> int:
        """Consume up to `count` lines (for --resume); returns how many there were."""
        skipped = 0
        while skipped < count:
            if b"\n" not in self._carry and self._read():
                continue
            buf, pos = self._carry, 0
            if buf and b"\n" not in buf:
                # End of input: a last line without its newline still counts.
                skipped += 1
                pos = len(buf)
            while skipped < count:
                end = buf.find(b"\n", pos)
                if end < 0:
                    break
                pos = end + 1
                skipped += 1
            self.offset += pos
            self._carry = buf[pos:]
            if not self._carry and self._eof:
                break
        return skipped

    def blocks(self) -> Iterator[Block]:
        """The rest of the input in blocks of about `block_bytes`, cut at line ends."""
        while True:
            self._read()
            buf = self._carry
            if not buf:
                return
            if self._eof:
                data, self._carry = buf, b""
            else:
                cut = buf.rfind(b"\n") + 1
                if cut == 0:
                    continue  # one line longer than a block: read on
                data, self._carry = buf[:cut], buf[cut:]
            self.offset += len(data)
            yield Block(data, self.offset)


def byte_ranges(start: int, end: int, block_bytes: int = BLOCK_BYTES) -> Iterator[tuple[int, int]]:
    """[start, end) in consecutive ranges of `block_bytes`."""
    for low in range(start, end, block_bytes):
        yield low, min(low + block_bytes, end)


def _find_newline(fd: int, position: int, limit: int) -> int:
    """Offset just after the first newline at or after `position`, else `limit`."""
    while position < limit:
        piece = os.pread(fd, min(_SCAN_BYTES, limit - position), position)
        if not piece:
            return limit
        index = piece.find(b"\n")
        if index >= 0:
            return position + index + 1
        position += len(piece)
    return limit


def read_range(fd: int, origin: int, start: int, end: int, size: int) -> bytes:
    """The lines of the file `fd` (`size` bytes) that start in [start, end).

    `origin` is where the first line of the whole run starts (0, or where --resume
    continues). A range that no line starts in is empty.
    """
    if start > origin:
        before = os.pread(fd, 1, start - 1)
        if before != b"\n":
            start = _find_newline(fd, start, size)
    if start >= end:
        return b""
    stop = end if end >= size else _find_newline(fd, end - 1, size)
    parts, position = [], start
    while position < stop:
        part = os.pread(fd, stop - position, position)
        if not part:
            raise EOFError("the input file shrank while it was read")
        parts.append(part)
        position += len(part)
    return b"".join(parts) if len(parts) != 1 else parts[0]


def split_lines(data: bytes) -> list[bytes]:
    """The lines of a block, without their ends."""
    lines = data.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()
    return lines


@dataclass(slots=True)
class Line:
    """One non-blank input line, parsed just enough to route it."""

    # The job body to render or publish; None for a bad line.
    body: bytes | None
    job_id: str | None = None
    kind: str | None = None
    # The messages sent before, normalised to role and content; None when absent or bad.
    prior: list[dict[str, str]] | None = None
    # The line named prior messages (so its drift is reported even when it is an error).
    has_prior: bool = False
    error_code: ErrorCode | None = None
    error_message: str | None = None

    @property
    def bad(self) -> bool:
        """The line could not be read as a job (the body may also be dropped once answered)."""
        return self.error_code is not None


def normalise_messages(value: Any) -> list[dict[str, str]] | None:
    """`value` as a list of {"role", "content"} strings, or None when it is not one."""
    if not isinstance(value, list):
        return None
    messages = []
    for item in value:
        if not isinstance(item, dict):
            return None
        role, content = item.get("role"), item.get("content")
        if not isinstance(role, str) or not isinstance(content, str):
            return None
        messages.append({"role": role, "content": content})
    return messages


def canonical_kind(kind: Any) -> str | None:
    """The job's kind as the worker spells it; junk collapses to None (bounded tallies)."""
    if not isinstance(kind, str):
        return None
    if kind in _KINDS:
        return kind
    alias = KIND_ALIASES.get(kind)
    return alias.value if alias is not None else None


def parse_line(raw: bytes, default_budget: dict[str, Any] | None = None) -> Line:
    """Route one non-blank line: its job body, identity and prior messages, or why it is
    bad. A job without a budget gets `default_budget` (rerender --budget), if given."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return _bad(ErrorCode.INVALID_JSON, f"not valid JSON: {json_error_words(exc)}")
    if not isinstance(data, dict):
        return _bad(ErrorCode.INVALID_JOB, f"not a JSON object (a {type(data).__name__})")
    # A wrapper: `job` beside the prior messages. An archive record (SPEC §12, with its
    # `record` version) is one although it carries the reply's `kind` too.
    if "job" in data and ("kind" not in data or "record" in data):
        job = data["job"]
        if not isinstance(job, dict):
            return _bad(ErrorCode.INVALID_JOB, '"job" is not a JSON object')
        # A bare job line is forwarded byte for byte; a wrapped job is re-serialised.
        line = Line(orjson.dumps(job))
        key = next((k for k in PRIOR_KEYS if k in data), None)
        if key is not None:
            line.has_prior = True
            line.prior = normalise_messages(data[key])
            if line.prior is None:
                line.body = None
                line.error_code = ErrorCode.INVALID_JOB
                line.error_message = f'"{key}" is not a list of {{"role", "content"}} strings'
    else:
        job = data
        line = Line(raw)
    if default_budget is not None and line.body is not None and "budget" not in job:
        line.body = orjson.dumps({**job, "budget": default_budget})
    job_id = job.get("job_id")
    line.job_id = job_id if isinstance(job_id, str) and job_id else None
    line.kind = canonical_kind(job.get("kind"))
    return line


def _bad(code: ErrorCode, reason: str) -> Line:
    return Line(None, error_code=code, error_message=reason)


def bad_line_reply(line: Line) -> dict[str, Any]:
    """The error reply recorded for a bad line, which is never rendered or published."""
    return {
        "job_id": line.job_id,
        "status": "error",
        "kind": line.kind,
        "error": {
            "code": (line.error_code or ErrorCode.INVALID_JOB).value,
            "message": line.error_message,
            "details": [],
        },
    }
