"""The input side: whole lines in blocks, and what one line holds.

An input line is a job, or `{"job": {...}, "messages": [...]}` where `messages` (or its
synonym `expected_messages`, the conformance files' spelling) is what was sent before.

Blocks are raw bytes cut at line ends: the process that reads the file never parses a
line, so with the local engine the parent only moves bytes and the parsing is spread
over the render processes. Nothing here holds more than one block.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

import orjson

from schemas.job import KIND_ALIASES, Kind
from schemas.reply import ErrorCode

BLOCK_BYTES = 1 << 20
PRIOR_KEYS = ("messages", "expected_messages")
_KINDS = frozenset(kind.value for kind in Kind)


@dataclass(frozen=True, slots=True)
class Block:
    """Whole input lines: `first_line` is the 1-based number of the first one."""

    first_line: int
    data: bytes
    # Byte offset in the input just after this block (progress and ETA).
    end_offset: int


class LineReader:
    """Cuts a byte stream into blocks of whole lines, counting lines and bytes."""

    def __init__(self, stream: BinaryIO, block_bytes: int = BLOCK_BYTES) -> None:
        self._stream = stream
        self._block_bytes = block_bytes
        self._carry = b""
        self._eof = False
        self.next_line = 1
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
        self.next_line += skipped
        return skipped

    def blocks(self) -> Iterator[Block]:
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
            lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
            self.offset += len(data)
            block = Block(self.next_line, data, self.offset)
            self.next_line += lines
            yield block


def split_block(block: Block) -> Iterator[tuple[int, bytes]]:
    """(line number, line without its end) for every line of `block`."""
    lines = block.data.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()
    for index, raw in enumerate(lines):
        yield block.first_line + index, raw


@dataclass(slots=True)
class Line:
    """One non-blank input line, parsed just enough to route it."""

    number: int
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


def _normalise_messages(value: Any) -> list[dict[str, str]] | None:
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


def parse_line(raw: bytes, number: int) -> Line:
    """Route one non-blank line: its job body, identity and prior messages, or why it is bad."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return _bad(number, ErrorCode.INVALID_JSON, f"not valid JSON: {exc}")
    if not isinstance(data, dict):
        return _bad(number, ErrorCode.INVALID_JOB, f"not a JSON object (a {type(data).__name__})")
    if "job" in data and "kind" not in data:
        job = data["job"]
        if not isinstance(job, dict):
            return _bad(number, ErrorCode.INVALID_JOB, '"job" is not a JSON object')
        # A bare job line is forwarded byte for byte; a wrapped job is re-serialised.
        line = Line(number, orjson.dumps(job))
        key = next((k for k in PRIOR_KEYS if k in data), None)
        if key is not None:
            line.has_prior = True
            line.prior = _normalise_messages(data[key])
            if line.prior is None:
                line.body = None
                line.error_code = ErrorCode.INVALID_JOB
                line.error_message = (
                    f'input line {number}: "{key}" is not a list of {{"role", "content"}} strings'
                )
    else:
        job = data
        line = Line(number, raw)
    job_id = job.get("job_id")
    line.job_id = job_id if isinstance(job_id, str) and job_id else None
    line.kind = canonical_kind(job.get("kind"))
    return line


def _bad(number: int, code: ErrorCode, reason: str) -> Line:
    return Line(number, None, error_code=code, error_message=f"input line {number}: {reason}")


def bad_line_reply(line: Line) -> dict[str, Any]:
    """The error reply recorded for a bad line, which is never rendered or published."""
    return {
        "job_id": line.job_id,
        "status": "error",
        "kind": line.kind,
        "error": {
            "code": (line.error_code or ErrorCode.INVALID_JOB).value,
            "message": line.error_message or f"input line {line.number} is unusable",
            "details": [],
        },
    }
