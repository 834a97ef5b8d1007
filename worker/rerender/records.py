"""Output records and their tallies; the same code for every engine.

Line N of the output answers line N of the input. A record is the reply the worker
makes, minus `meta.render_ms` (a timing that differs on every render: without it,
re-rendering the same input gives the same file byte for byte, whichever engine and
however often interrupted), plus:
  * `drift`: `same` / `changed` / `error`, only for lines that carried prior messages;
  * `bad_line: true`, only for an input line that could not be read as a job.
Key order is the reply's, then these, so equal replies give equal bytes. A blank input
line gets an empty output line, which keeps the two files aligned.

Chunks number their lines from 0; whoever writes them knows where a chunk starts and
turns these into input line numbers (the render processes never need to know).
"""

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import orjson

from schemas.codes import ErrorCode
from worker.render.replies import RenderOutcome
from worker.rerender.drift import CHANGED, classify, message_diff
from worker.rerender.lines import Line, canonical_kind

VOLATILE_META = ("render_ms",)
# Where the meta object starts in a reply body: the first `,"meta":` outside a string
# is the top-level key (an unescaped quote cannot occur inside a JSON string, and
# messages, which come before it, hold only role and content strings).
_META_KEY = b',"meta":'
MAX_BAD_SAMPLES = 100
_CODES = frozenset(code.value for code in ErrorCode)
# writev takes at most IOV_MAX (1024 on Linux) buffers per call.
_IOV_MAX = 1024


@dataclass(slots=True)
class Tally:
    """Counts over records; small and mergeable (chunks travel between processes)."""

    # (kind, status, error code, drift) -> records; "" where a field does not apply.
    outcomes: Counter[tuple[str, str, str, str]] = field(default_factory=Counter)
    # (family, template_version) -> ok replies.
    versions: Counter[tuple[str, str]] = field(default_factory=Counter)
    blank_lines: int = 0
    bad_lines: int = 0
    # (line, reason) of the first bad lines; lines count from 0 within a chunk, from 1
    # once merged into a run's tally.
    bad_samples: list[tuple[int, str]] = field(default_factory=list)
    # Sum of meta.render_ms over the replies of this run (records do not keep it).
    render_ms: float = 0.0
    timed: int = 0
    # Sums of meta.cache's stable_tokens and prompt_tokens over the ok replies: the
    # cacheable share of the prompts (CONTRACT.md §11.1).
    stable_tokens: int = 0
    prompt_tokens: int = 0

    def add(self, record: dict[str, Any], line: int = 0, render_ms: Any = None) -> None:
        """Count one record (a reply dict with this module's additions)."""
        status = "ok" if record.get("status") == "ok" else "error"
        error = record.get("error")
        code = error.get("code") if status == "error" and isinstance(error, dict) else None
        meta = record.get("meta")
        family = version = cache = None
        if status == "ok" and isinstance(meta, dict):
            family, version = meta.get("family"), meta.get("template_version")
            cache = meta.get("cache")
        bad_reason = None
        if record.get("bad_line"):
            message = error.get("message") if isinstance(error, dict) else None
            bad_reason = str(message or "")
        drift = record.get("drift")
        self.count(
            kind=record.get("kind"),
            status=status,
            code=code,
            drift=drift if isinstance(drift, str) else None,
            family=family,
            version=version,
            line=line,
            bad_reason=bad_reason,
            render_ms=render_ms,
            cache=cache,
        )

    def count(
        self,
        *,
        kind: Any,
        status: str,
        code: Any = None,
        drift: str | None = None,
        family: Any = None,
        version: Any = None,
        line: int = 0,
        bad_reason: str | None = None,
        render_ms: Any = None,
        cache: Any = None,
    ) -> None:
        # Bounded keys whatever a reply says: unknown error codes are counted together.
        code = (code if code in _CODES else "other") if status == "error" else ""
        self.outcomes[(canonical_kind(kind) or "", status, code, drift or "")] += 1
        if isinstance(version, str):
            self.versions[(family if isinstance(family, str) else "", version)] += 1
        if bad_reason is not None:
            self.bad_lines += 1
            if len(self.bad_samples) < MAX_BAD_SAMPLES:
                self.bad_samples.append((line, bad_reason))
        if isinstance(render_ms, int | float):
            self.render_ms += render_ms
            self.timed += 1
        if isinstance(cache, dict):
            stable, prompt = cache.get("stable_tokens"), cache.get("prompt_tokens")
            if isinstance(stable, int) and isinstance(prompt, int):
                self.stable_tokens += stable
                self.prompt_tokens += prompt

    def merge(self, other: "Tally", first_line: int = 0) -> None:
        """Add `other`, whose sample line numbers count from `first_line`."""
        self.outcomes.update(other.outcomes)
        self.versions.update(other.versions)
        self.blank_lines += other.blank_lines
        self.bad_lines += other.bad_lines
        room = MAX_BAD_SAMPLES - len(self.bad_samples)
        if room > 0:
            self.bad_samples += [(first_line + n, why) for n, why in other.bad_samples[:room]]
        self.render_ms += other.render_ms
        self.timed += other.timed
        self.stable_tokens += other.stable_tokens
        self.prompt_tokens += other.prompt_tokens

    @property
    def records(self) -> int:
        return sum(self.outcomes.values())

    @property
    def errors(self) -> int:
        return sum(n for (_, status, _, _), n in self.outcomes.items() if status == "error")

    def drift(self, value: str) -> int:
        return sum(n for (_, _, _, drift), n in self.outcomes.items() if drift == value)


@dataclass(frozen=True, slots=True)
class Diff:
    """A changed job's diff; `line` counts from 0 within its chunk."""

    line: int
    job_id: str | None
    kind: str | None
    text: str


@dataclass(slots=True)
class ChunkResult:
    """The records of consecutive input lines and what they add to the tallies.

    The records are in `output`, unless a render process already wrote them to the
    output itself (`written`), in its turn.
    """

    output: bytes
    lines: int
    tally: Tally
    diffs: list[Diff]
    # The input offset after these lines (progress and ETA).
    end_offset: int
    written: bool = False


class ChunkBuilder:
    """Collects the records of consecutive input lines, in order, into one ChunkResult."""

    def __init__(self, diff_budget: int) -> None:
        # Records and their newlines, joined (or written) once at the end.
        self._parts: list[bytes | memoryview] = []
        self._tally = Tally()
        self._diffs: list[Diff] = []
        self._diff_budget = diff_budget
        self.lines = 0

    def blank(self) -> None:
        self._parts.append(b"\n")
        self._tally.blank_lines += 1
        self.lines += 1

    def add(self, line: Line, reply: dict[str, Any]) -> None:
        """Record `reply` (the worker's, or an error made here) as the answer to `line`."""
        meta = reply.get("meta")
        render_ms = None
        if isinstance(meta, dict):
            render_ms = meta.get("render_ms")
            for key in VOLATILE_META:
                meta.pop(key, None)
        if line.has_prior:
            reply["drift"] = self._drift(line, reply.get("status") == "ok", reply.get("messages"))
        if line.bad:
            reply["bad_line"] = True
        record = orjson.dumps(reply)
        self._parts += (record, b"\n")
        self._tally.add(reply, self.lines, render_ms)
        self.lines += 1

    def add_rendered(self, line: Line, outcome: RenderOutcome) -> None:
        """Record an `ok` outcome of this process's renderer without parsing its body.

        Gives the very bytes `add(line, orjson.loads(outcome.body))` would (tested), at
        a fraction of the cost: the body is `{..., "messages": [...], "meta": {...}}` as
        orjson wrote it, so only the small meta object is re-serialised.
        """
        body = outcome.body
        start = body.rfind(_META_KEY)
        meta: Any = None
        if start > 0 and body.endswith(b"}}"):
            try:
                meta = orjson.loads(body[start + len(_META_KEY) : -1])
            except orjson.JSONDecodeError:
                meta = None
        if not isinstance(meta, dict):
            self.add(line, orjson.loads(body))
            return
        render_ms = meta.get("render_ms")
        for key in VOLATILE_META:
            meta.pop(key, None)
        tail = [b',"meta":', orjson.dumps(meta)]
        drift = None
        if line.has_prior:
            drift = self._drift(line, True, outcome.messages)
            tail.append(b',"drift":"' + drift.encode() + b'"')
        tail.append(b"}\n")
        # A view, not a slice: the bulk of the body is copied once, into the output.
        self._parts.append(memoryview(body)[:start])
        self._parts += tail
        self._tally.count(
            kind=outcome.kind,
            status="ok",
            drift=drift,
            family=meta.get("family"),
            version=meta.get("template_version"),
            render_ms=render_ms,
            cache=meta.get("cache"),
        )
        self.lines += 1

    def _drift(self, line: Line, ok: bool, messages: Any) -> str:
        drift = classify(ok, messages, line.prior)
        if drift == CHANGED and len(self._diffs) < self._diff_budget:
            text = message_diff(line.prior or [], messages)
            self._diffs.append(Diff(self.lines, line.job_id, line.kind, text))
        return drift

    def __len__(self) -> int:
        return self.lines

    def result(self, end_offset: int) -> ChunkResult:
        output = b"".join(self._parts)
        return ChunkResult(output, self.lines, self._tally, self._diffs, end_offset)

    def written_result(self, end_offset: int) -> ChunkResult:
        """The result of a chunk whose records `write_to` already wrote."""
        return ChunkResult(b"", self.lines, self._tally, self._diffs, end_offset, written=True)

    def write_to(self, fd: int) -> None:
        """Write the records to `fd`, straight from their parts: no joined copy."""
        parts = self._parts
        for low in range(0, len(parts), _IOV_MAX):
            batch: list[bytes | memoryview] = parts[low : low + _IOV_MAX]
            expected = sum(len(part) for part in batch)
            written = os.writev(fd, batch)
            if written < expected:  # a short write: finish this batch the slow way
                rest = memoryview(b"".join(batch))[written:]
                while rest:
                    rest = rest[os.write(fd, rest) :]
