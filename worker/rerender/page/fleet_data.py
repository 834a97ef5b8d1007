"""What the fleet page shows, gathered from archive records as they are read (SPEC §12).

Counts, sizes and tokens cover every record of the window; the prompts themselves
(what each session sent, the masked text the record holds: a credential never reaches
the archive) are kept for the most recent `max_sessions` sessions, up to
`max_prompts` records each, so the page stays a size a browser opens. The page says
when it left any out.
"""

import datetime
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from worker.archive.read_window import record_kind
from worker.archive.reading import Delivery
from worker.archive.record import session_id_of
from worker.rerender.archive_input import ReadState
from worker.rerender.run_report import cacheable

NO_SESSION = "(no session)"
# Bucket widths of the time chart, in seconds: the smallest giving at most ~60 bars.
_BUCKETS = (60, 300, 900, 3600, 3 * 3600, 6 * 3600, 86400)
_MAX_BARS = 60


@dataclass(frozen=True, slots=True)
class FleetLimits:
    max_sessions: int = 500
    max_prompts: int = 50


def _percentiles(values: list[int]) -> dict[str, int | None]:
    ordered = sorted(values)
    if not ordered:
        return {"p50": None, "p95": None, "max": None}

    def at(share: float) -> int:
        return ordered[min(len(ordered) - 1, int(share * len(ordered)))]

    return {"p50": at(0.5), "p95": at(0.95), "max": ordered[-1]}


def _when(record: dict[str, Any], delivery: Delivery) -> datetime.datetime | None:
    text = record.get("answered_at")
    if isinstance(text, str):
        try:
            return datetime.datetime.fromisoformat(text).astimezone(datetime.UTC)
        except ValueError:
            pass
    return delivery.timestamp


@dataclass(slots=True)
class _KindRow:
    records: int = 0
    errors: int = 0
    prompt_chars: list[int] = field(default_factory=list)
    prompt_tokens: list[int] = field(default_factory=list)


class FleetData:
    """A `RecordSink` (worker/rerender/archive_input.py) that tallies the fleet page."""

    def __init__(self, state: ReadState, limits: FleetLimits | None = None) -> None:
        self.state = state
        self.limits = limits or FleetLimits()
        # Records per (minute, kind, family): memory by the window's length, not its
        # records; the chart's buckets are whole minutes.
        self._minutes: Counter[tuple[int, str, str]] = Counter()
        self._kinds: dict[str, _KindRow] = defaultdict(_KindRow)
        self._families: Counter[str] = Counter()
        self._errors: Counter[str] = Counter()
        self._masked: Counter[str] = Counter()
        self._elisions: Counter[str] = Counter()
        self._trimmed = 0
        self._budgeted = 0
        self._stable_tokens = 0
        self._cache_tokens = 0
        self._sessions: dict[str, dict[str, Any]] = {}
        self._prompts_left_out = 0

    def add(self, record: dict[str, Any], delivery: Delivery) -> None:
        self.state.records += 1
        self.state.last_offset = delivery.offset
        job = record.get("job") or {}
        meta = record.get("meta") if isinstance(record.get("meta"), dict) else {}
        assert isinstance(meta, dict)
        kind = record_kind(record) or "(unknown)"
        family = str(meta.get("family") or delivery.headers.get("family") or "(unknown)")
        when = _when(record, delivery)
        if when is not None:
            self._minutes[(int(when.timestamp()) // 60, kind, family)] += 1
        self._families[family] += 1
        row = self._kinds[kind]
        row.records += 1
        if record.get("status") == "error":
            row.errors += 1
            error = record.get("error") if isinstance(record.get("error"), dict) else {}
            self._errors[str((error or {}).get("code") or "(no code)")] += 1
        self._tally_meta(meta, row)
        self._keep_prompt(record, job, kind, when)

    def _tally_meta(self, meta: dict[str, Any], row: _KindRow) -> None:
        if isinstance(meta.get("prompt_chars"), int):
            row.prompt_chars.append(meta["prompt_chars"])
        cache = meta.get("cache") if isinstance(meta.get("cache"), dict) else None
        if cache and isinstance(cache.get("prompt_tokens"), int):
            row.prompt_tokens.append(cache["prompt_tokens"])
            self._cache_tokens += cache["prompt_tokens"]
            self._stable_tokens += int(cache.get("stable_tokens") or 0)
        masked = meta.get("masked")
        if isinstance(masked, dict):
            for detector, n in masked.items():
                if isinstance(n, int):
                    self._masked[str(detector)] += n
        budget = meta.get("budget")
        if isinstance(budget, dict):
            self._budgeted += 1
            if budget.get("trimmed"):
                self._trimmed += 1
            for elision in budget.get("elisions") or []:
                if isinstance(elision, dict):
                    self._elisions[str(elision.get("section"))] += 1

    def _keep_prompt(
        self, record: dict[str, Any], job: dict[str, Any], kind: str, when: datetime.datetime | None
    ) -> None:
        session_id = session_id_of(job) or NO_SESSION
        session = self._sessions.get(session_id)
        if session is None:
            if len(self._sessions) >= self.limits.max_sessions:
                self._drop_oldest_session()
            session = {"id": session_id, "records": 0, "last": None, "prompts": []}
            self._sessions[session_id] = session
        session["records"] += 1
        session["last"] = when.isoformat() if when else session["last"]
        if len(session["prompts"]) >= self.limits.max_prompts:
            self._prompts_left_out += 1
            return
        session["prompts"].append(
            {
                "job_id": record.get("job_id") or job.get("job_id"),
                "kind": kind,
                "status": record.get("status"),
                "answered_at": when.isoformat() if when else None,
                "messages": record.get("messages") or [],
                "error": record.get("error"),
            }
        )

    def _drop_oldest_session(self) -> None:
        oldest = next(iter(self._sessions))
        self._prompts_left_out += len(self._sessions.pop(oldest)["prompts"])

    def bad(self, delivery: Delivery, reason: str) -> None:
        self.state.note_bad(delivery.offset, reason)

    def save(self) -> None:
        """Nothing to keep: a report reads its window again."""

    def _timeline(self) -> dict[str, Any]:
        if not self._minutes:
            return {"bucket_s": None, "buckets": []}
        first = 60 * min(minute for minute, _, _ in self._minutes)
        last = 60 * max(minute for minute, _, _ in self._minutes)
        width = next((w for w in _BUCKETS if (last - first) / w < _MAX_BARS), _BUCKETS[-1])
        start = first - first % width
        buckets: dict[int, dict[str, Counter[str]]] = {}
        for (minute, kind, family), n in self._minutes.items():
            slot = (60 * minute - start) // width
            counts = buckets.setdefault(slot, {"kinds": Counter(), "families": Counter()})
            counts["kinds"][kind] += n
            counts["families"][family] += n
        return {
            "bucket_s": width,
            "buckets": [
                {
                    "slot": slot,
                    "start": datetime.datetime.fromtimestamp(
                        start + slot * width, datetime.UTC
                    ).isoformat(),
                    "kinds": dict(counts["kinds"]),
                    "families": dict(counts["families"]),
                }
                for slot, counts in sorted(buckets.items())
            ],
        }

    def page_data(self) -> dict[str, Any]:
        sessions = sorted(self._sessions.values(), key=lambda s: s["last"] or "", reverse=True)
        return {
            "archive": self.state.as_json(),
            "totals": {
                "records": self.state.records,
                "errors": sum(row.errors for row in self._kinds.values()),
                "unreadable": self.state.bad,
                "sessions": len(self._sessions),
                "cacheable": cacheable(self._stable_tokens, self._cache_tokens),
                "budgeted": self._budgeted,
                "trimmed": self._trimmed,
            },
            "timeline": self._timeline(),
            "kinds": {
                kind: {
                    "records": row.records,
                    "errors": row.errors,
                    "prompt_chars": _percentiles(row.prompt_chars),
                    "prompt_tokens": _percentiles(row.prompt_tokens),
                }
                for kind, row in sorted(self._kinds.items())
            },
            "families": dict(self._families.most_common()),
            "errors_by_code": dict(self._errors.most_common()),
            "masked_by_detector": dict(self._masked.most_common()),
            "elisions_by_section": dict(self._elisions.most_common()),
            "sessions": sessions,
            "prompts_left_out": self._prompts_left_out,
        }
