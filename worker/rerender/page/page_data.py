"""What the drift page shows, gathered in one pass over a run's input and output files.

Line N of the output answers line N of the input, so the two files are read side by
side, a line of each at a time: memory does not grow with the files. Only what the page
needs is parsed: every output record (for the counts, which are the drift report's), and
an input line only when its job changed (its prior messages) or when it records the
template version it was sent with.

Everything kept is bounded by `PageLimits`: the distinct changes and error groups, the
job ids listed per group and in all, the bad lines listed, and the characters of diff
text. What a limit leaves out is counted, and the page says so (`notes`).
"""

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from worker.rerender.drift import CHANGED
from worker.rerender.lines import canonical_kind, normalise_messages, parse_line
from worker.rerender.page.changes import Change, change_signature, describe_change, message_changes
from worker.rerender.records import Tally
from worker.rerender.run_report import UNKNOWN_KIND, by_kind, errors_by_code, totals

# The page's data format; the script in the page reads this version.
FORMAT = 1
# Characters of an error message or bad-line reason kept; of a bad line's text shown.
MESSAGE_CHARS = 500
SNIPPET_CHARS = 300
# Validation problems named in an error group's message.
MAX_DETAILS = 5
# Characters of a job id kept (ids are the producers' and could be anything).
ID_CHARS = 200
# Distinct template versions counted per side; the input could name any number.
MAX_VERSIONS = 500
OTHER_VERSIONS = "(other versions)"
_VERSION_KEY = b'"template_version"'


class PageError(Exception):
    """The files cannot make a page (missing, unreadable, not a run's input and output)."""


@dataclass(frozen=True, slots=True)
class PageLimits:
    """How much the page holds; what is beyond is counted, not listed."""

    # Distinct changes (per kind) and error groups (kind, code, message) tracked, in the
    # order they are first met.
    changes: int = 2000
    error_groups: int = 500
    bad_lines: int = 1000
    # Job ids (with their input lines) listed per group, and over the whole page.
    ids_per_group: int = 1000
    ids_total: int = 50_000
    # Characters of text in one change's diff, and in the diffs of the whole page (the
    # changes touching the most jobs get theirs first).
    example_chars: int = 32_000
    page_example_chars: int = 8_000_000


@dataclass(slots=True)
class _Group:
    """Jobs that made one distinct change, or failed with one error."""

    id: str
    kind: str
    first_line: int
    jobs: int = 0
    ids: list[tuple[int, str | None]] = field(default_factory=list)
    change: Change | None = None
    example_job: tuple[int, str | None] | None = None
    # The example job's new prompt: each message's cacheable prefix (meta.cache).
    example_cacheable: list[dict[str, Any]] | None = None
    code: str = ""
    message: str = ""


def _short_hash(*parts: str) -> str:
    digest = hashlib.blake2b(digest_size=6)
    for part in parts:
        digest.update(part.encode("utf-8", "surrogatepass") + b"\x00")
    return digest.hexdigest()


def _kind(value: Any) -> str:
    return canonical_kind(value) or UNKNOWN_KIND


def _text(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else ("" if value is None else str(value))
    return text if len(text) <= limit else text[:limit] + "…"


def _error_of(record: dict[str, Any]) -> dict[str, Any]:
    error = record.get("error")
    return error if isinstance(error, dict) else {}


def _job_id(record: dict[str, Any]) -> str | None:
    job_id = record.get("job_id")
    return _text(job_id, ID_CHARS) if isinstance(job_id, str) else None


def _details(details: list[Any]) -> str:
    parts = []
    for item in details[:MAX_DETAILS]:
        if isinstance(item, dict):
            field_name, why = item.get("field"), item.get("message")
            parts.append(f"{field_name}: {why}" if field_name else str(why))
    more = len(details) - MAX_DETAILS
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


class PageCollector:
    """Takes the (input, output) line pairs of a run, in order; gives the page's data."""

    def __init__(self, limits: PageLimits | None = None) -> None:
        self.limits = limits or PageLimits()
        self.tally = Tally()
        # The records of jobs, bad lines apart: the by-kind table counts jobs, as the
        # page's header does.
        self.jobs = Tally()
        self.lines = 0
        self.changes: dict[tuple[str, str], _Group] = {}
        self.errors: dict[tuple[str, str, str], _Group] = {}
        # Jobs counted but in no listed group (beyond the group limits), by kind.
        self.unlisted_changed: Counter[str] = Counter()
        self.unlisted_errors: Counter[str] = Counter()
        # Codes of the jobs that did not render (bad lines are counted apart).
        self.error_codes: Counter[str] = Counter()
        self.bad: list[dict[str, Any]] = []
        self.ids_listed = 0
        self.ids_left_out = 0
        # (kind, family, template_version) -> records: sent before (as the input
        # records it) and rendered now.
        self.before: Counter[tuple[str, str, str]] = Counter()
        self.after: Counter[tuple[str, str, str]] = Counter()

    # -- one line pair -----------------------------------------------------------------

    def add(self, number: int, raw_in: bytes, raw_out: bytes, where: str) -> None:
        """Line `number` of the input (`raw_in`) and of the output (`raw_out`), each
        with its newline, if it has one (left on: copying every line costs more)."""
        self.lines = number
        if raw_out == b"\n":
            if raw_in.strip():
                raise PageError(
                    f"{where}: line {number:,} is empty but the input's line is not: "
                    "is this the output of that input?"
                )
            self.tally.blank_lines += 1
            return
        try:
            record = orjson.loads(raw_out)
        except orjson.JSONDecodeError:
            record = None
        if not isinstance(record, dict) or "status" not in record:
            raise PageError(
                f"{where}: line {number:,} is not a rerender record: is this what "
                "`prompt-worker rerender --out` wrote?"
            )
        self.tally.add(record, number)
        if not record.get("bad_line"):
            _check_pair(number, raw_in, record, where)
            self.jobs.add(record, number)
        kind = _kind(record.get("kind"))
        meta = record.get("meta")
        if record.get("status") == "ok" and isinstance(meta, dict):
            self._version(self.after, kind, meta)
        if _VERSION_KEY in raw_in:
            self._version_sent(kind, raw_in)
        if record.get("bad_line"):
            self._bad_line(number, record, raw_in)
        elif record.get("status") != "ok":
            self._error(number, kind, record)
        elif record.get("drift") == CHANGED:
            self._changed(number, kind, record, raw_in, where)

    @staticmethod
    def _version(counter: Counter[tuple[str, str, str]], kind: str, meta: dict[str, Any]) -> None:
        version = meta.get("template_version")
        if isinstance(version, str):
            family = meta.get("family")
            key = (kind, _text(family, 80), _text(version, 80))
            if key not in counter and len(counter) >= MAX_VERSIONS:
                key = (kind, "", OTHER_VERSIONS)
            counter[key] += 1

    def _version_sent(self, kind: str, raw_in: bytes) -> None:
        """The template version the input line says its prior messages were made with:
        the `meta` of the reply that was sent, kept beside the job, or a top-level key."""
        try:
            data = orjson.loads(raw_in)
        except orjson.JSONDecodeError:
            return
        if not isinstance(data, dict) or "job" not in data:
            return
        meta = data.get("meta")
        if not isinstance(meta, dict):
            meta = data
        self._version(self.before, kind, meta)

    def _listed(self, group: _Group, number: int, job_id: str | None) -> None:
        group.jobs += 1
        if len(group.ids) < self.limits.ids_per_group and self.ids_listed < self.limits.ids_total:
            group.ids.append((number, job_id))
            self.ids_listed += 1
        else:
            self.ids_left_out += 1

    def _bad_line(self, number: int, record: dict[str, Any], raw_in: bytes) -> None:
        if len(self.bad) >= self.limits.bad_lines:
            return
        error = _error_of(record)
        self.bad.append(
            {
                "line": number,
                "code": _text(error.get("code"), 40),
                "reason": _text(error.get("message"), MESSAGE_CHARS),
                "job_id": _job_id(record),
                "kind": _kind(record.get("kind")),
                "text": _text(
                    raw_in[: SNIPPET_CHARS * 4].rstrip(b"\n").decode("utf-8", "replace"),
                    SNIPPET_CHARS,
                ),
            }
        )

    def _error(self, number: int, kind: str, record: dict[str, Any]) -> None:
        error = _error_of(record)
        code = _text(error.get("code"), 40) or "other"
        message = _text(error.get("message"), MESSAGE_CHARS)
        details = error.get("details")
        if isinstance(details, list) and details:
            # "job failed validation (1 problem)" says little: the details say which.
            message = _text(f"{message}: {_details(details)}", MESSAGE_CHARS)
        self.error_codes[code] += 1
        key = (kind, code, message)
        group = self.errors.get(key)
        if group is None:
            if len(self.errors) >= self.limits.error_groups:
                self.unlisted_errors[kind] += 1
                return
            group = _Group(f"{kind}.{_short_hash(code, message)}", kind, number)
            group.code, group.message = code, message
            self.errors[key] = group
        self._listed(group, number, _job_id(record))

    def _changed(
        self, number: int, kind: str, record: dict[str, Any], raw_in: bytes, where: str
    ) -> None:
        line = parse_line(raw_in)
        job_id = _job_id(record)
        if line.prior is None or line.job_id != record.get("job_id"):
            holds = f"job {line.job_id!r}" if line.prior is not None else "no prior messages"
            raise PageError(
                f"{where}: line {number:,} is the changed job {job_id!r} but the input's "
                f"line holds {holds}: is this the output of that input?"
            )
        after = normalise_messages(record.get("messages"))
        if after is None:
            raise PageError(f"{where}: line {number:,} is a changed job without messages")
        changes = message_changes(line.prior, after)
        signature = change_signature(changes)
        group = self.changes.get((kind, signature))
        if group is None:
            if len(self.changes) >= self.limits.changes:
                self.unlisted_changed[kind] += 1
                return
            group = _Group(f"{kind}.{signature[:12]}", kind, number)
            group.change = describe_change(changes, self.limits.example_chars)
            group.example_job = (number, job_id)
            group.example_cacheable = cacheable_prefixes(after, record.get("meta"))
            self.changes[(kind, signature)] = group
        self._listed(group, number, job_id)

    # -- the page's data -----------------------------------------------------------------

    def data(self, *, input_name: str, output_name: str, partial: bool) -> dict[str, Any]:
        counts = totals(self.tally)
        changes = sorted(
            self.changes.values(), key=lambda g: (-g.jobs, g.first_line)
        )  # most jobs first: they get their diffs within the page's budget first
        room = self.limits.page_example_chars
        change_rows, without_diff, cut = [], 0, 0
        for group in changes:
            change = group.change
            assert change is not None
            fits = change.example_chars <= room
            if fits:
                room -= change.example_chars
                cut += change.example_cut
            else:
                without_diff += 1
            change_rows.append(self._change_row(group, change, fits))
        errors = sorted(self.errors.values(), key=lambda g: (-g.jobs, g.first_line))
        data: dict[str, Any] = {
            "format": FORMAT,
            "input": input_name,
            "output": output_name,
            "lines": self.lines,
            "partial": partial,
            "totals": counts,
            "errors_by_code": errors_by_code(self.tally),
            "job_errors_by_code": dict(sorted(self.error_codes.items())),
            "by_kind": by_kind(self.jobs),
            "versions": {
                "before": self._versions(self.before),
                "after": self._versions(self.after),
            },
            "changes": change_rows,
            "errors": [
                {
                    "id": g.id,
                    "kind": g.kind,
                    "code": g.code,
                    "message": g.message,
                    "jobs": g.jobs,
                    "ids": g.ids,
                }
                for g in errors
            ],
            "bad_lines": self.bad,
            "unlisted": {
                "changed": dict(sorted(self.unlisted_changed.items())),
                "errors": dict(sorted(self.unlisted_errors.items())),
                "bad_lines": counts["bad_lines"] - len(self.bad),
                "ids": self.ids_left_out,
                "diffs": without_diff,
                "diffs_cut": cut,
            },
            "limits": {
                "changes": self.limits.changes,
                "error_groups": self.limits.error_groups,
                "bad_lines": self.limits.bad_lines,
                "ids_per_group": self.limits.ids_per_group,
                "ids_total": self.limits.ids_total,
                "example_chars": self.limits.example_chars,
                "page_example_chars": self.limits.page_example_chars,
            },
        }
        data["notes"] = notes(data)
        return data

    @staticmethod
    def _change_row(group: _Group, change: Change, with_diff: bool) -> dict[str, Any]:
        return {
            "id": group.id,
            "kind": group.kind,
            "signature": change.signature,
            "jobs": group.jobs,
            "ids": group.ids,
            "messages": change.messages,
            "removed": change.removed,
            "added": change.added,
            "summary": change.summary,
            "example_job": group.example_job,
            "diff": change.example if with_diff else None,
            "diff_cut": change.example_cut,
            "cacheable": group.example_cacheable,
        }

    @staticmethod
    def _versions(counter: Counter[tuple[str, str, str]]) -> list[dict[str, Any]]:
        return [
            {"kind": kind, "family": family, "template_version": version, "records": n}
            for (kind, family, version), n in sorted(counter.items())
        ]


def cacheable_prefixes(messages: list[dict[str, str]], meta: Any) -> list[dict[str, Any]] | None:
    """Each message's role, characters and cacheable prefix in characters: the whole of
    every message before the last cache breakpoint's, that one up to the breakpoint, none
    after (CONTRACT.md §11.1). None for a reply without meta.cache."""
    cache = meta.get("cache") if isinstance(meta, dict) else None
    points = cache.get("breakpoints") if isinstance(cache, dict) else None
    if not isinstance(points, list):
        return None
    last = points[-1] if points else {"message": -1, "chars": 0}
    rows = []
    for index, message in enumerate(messages):
        size = len(message.get("content", ""))
        if index < last["message"]:
            cacheable = size
        elif index == last["message"]:
            cacheable = min(size, last["chars"])
        else:
            cacheable = 0
        rows.append({"role": message.get("role"), "chars": size, "cacheable": cacheable})
    return rows


def notes(data: dict[str, Any]) -> list[str]:
    """What the page leaves out, in words; also how to get it."""
    out: list[str] = []
    unlisted, limits, counts = data["unlisted"], data["limits"], data["totals"]
    if data["partial"]:
        out.append(
            f"The output answers only the first {data['lines']:,} input lines: the run was "
            "interrupted. `prompt-worker rerender --resume` continues it."
        )
    changed = sum(unlisted["changed"].values())
    if changed:
        out.append(
            f"{changed:,} changed jobs made changes beyond the first "
            f"{limits['changes']:,} distinct ones found: they are counted, not listed."
        )
    errors = sum(unlisted["errors"].values())
    if errors:
        out.append(
            f"{errors:,} failed jobs had errors beyond the first "
            f"{limits['error_groups']:,} distinct ones found: they are counted, not listed."
        )
    if unlisted["ids"]:
        out.append(
            f"Job ids: {unlisted['ids']:,} are not listed (at most "
            f"{limits['ids_per_group']:,} per change or error, {limits['ids_total']:,} in "
            "all); the output file has every one (its `drift` field)."
        )
    if unlisted["diffs"]:
        out.append(
            f"{unlisted['diffs']:,} changes are shown without their diff: the page holds "
            f"at most {limits['page_example_chars']:,} characters of diff text, and the "
            "changes touching the most jobs came first. `prompt-worker rerender "
            "--all-diffs` writes every changed job's diff to a file."
        )
    if unlisted["diffs_cut"]:
        out.append(
            f"{unlisted['diffs_cut']:,} diffs are shortened (at most "
            f"{limits['example_chars']:,} characters of text each): some unchanged "
            "stretches cannot be unfolded, or long lines are cut."
        )
    if unlisted["bad_lines"] > 0:
        out.append(
            f"Bad input lines: the first {len(data['bad_lines']):,} of "
            f"{counts['bad_lines']:,} are listed."
        )
    return out


def collect(
    input_path: str | Path,
    output_path: str | Path,
    limits: PageLimits | None = None,
) -> dict[str, Any]:
    """The page's data for the run that read `input_path` and wrote `output_path`."""
    collector = PageCollector(limits)
    where = str(output_path)
    try:
        with open(input_path, "rb") as source, open(output_path, "rb") as output:
            torn = False
            for number, raw_out in enumerate(output, 1):
                raw_in = source.readline()
                if not raw_out.endswith(b"\n"):
                    _check_torn(raw_out, number, where)
                    torn = True  # a run killed mid-write: --resume cuts this line off
                    break
                if not raw_in:
                    raise PageError(
                        f"{where} has more lines than {input_path} ({number - 1:,}): "
                        "is this the output of that input?"
                    )
                collector.add(number, raw_in, raw_out, where)
            partial = torn or bool(source.readline())
            if collector.lines == 0 and partial and not torn:
                # Nothing says this is a run's output, nor which run: refused, not shown
                # as a run interrupted before its first record.
                raise PageError(f"{where} is empty: it holds no rerender record of {input_path}")
    except FileNotFoundError as exc:
        raise PageError(f"{exc.filename}: no such file") from None
    except IsADirectoryError as exc:
        raise PageError(f"{exc.filename}: is a directory, expected a JSON-lines file") from None
    except OSError as exc:
        raise PageError(f"{exc.filename or where}: cannot read: {exc.strerror}") from None
    return collector.data(input_name=str(input_path), output_name=where, partial=partial)


def _check_pair(number: int, raw_in: bytes, record: dict[str, Any], where: str) -> None:
    """Refuse a record that does not answer its input line: the output of another input
    (its job ids differ) would otherwise read as a run with nothing changed. The job id
    is looked for in the line's bytes first (no parse, every line); only a line without
    it is parsed, in case it spells the id with escapes."""
    job_id = record.get("job_id")
    if not isinstance(job_id, str) or orjson.dumps(job_id) in raw_in:
        return
    line = parse_line(raw_in)
    if line.job_id == job_id:
        return
    holds = f"job {line.job_id!r}" if line.job_id is not None else "no job"
    raise PageError(
        f"{where}: line {number:,} answers job {_text(job_id, ID_CHARS)!r} but the input's "
        f"line {number:,} holds {holds}: is this the output of that input?"
    )


def _check_torn(raw_out: bytes, number: int, where: str) -> None:
    """Refuse a last line without its newline unless it can be a record cut short.

    A run killed mid-write leaves the start of a record (a JSON object, cut anywhere);
    a line that is whole JSON but no record, or does not start as one, means the file
    is something else, and calling it an interrupted run would mislead.
    """
    try:
        record = orjson.loads(raw_out)
    except orjson.JSONDecodeError:
        if raw_out.startswith(b'{"'):
            return
    else:
        if isinstance(record, dict) and "status" in record:
            return
    raise PageError(
        f"{where}: line {number:,} is not a rerender record: is this what "
        "`prompt-worker rerender --out` wrote?"
    )
