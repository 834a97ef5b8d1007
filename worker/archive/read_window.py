"""Which records a reading run takes: a time window and filters (SPEC §12, "Reading it").

`--since` and `--until` are RFC 3339 times (`2026-11-28T09:00:00Z`; a time without an
offset is refused, not guessed) or an age before now: `7d`, `12h`, `30m`, `45s`.
Kind, family and session filters read the record's headers when it has them, so a
record another filter excludes is never decompressed; else its job.
"""

import datetime
import re
from dataclasses import dataclass, field
from typing import Any

from worker.archive.record import session_id_of

_AGE = re.compile(r"(\d+)([dhms])")
_UNITS = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}


class WindowError(ValueError):
    """A --since or --until that is neither an RFC 3339 time nor an age."""


def parse_when(text: str, now: datetime.datetime) -> datetime.datetime:
    """The time `text` names: an RFC 3339 time with its offset, or an age before `now`."""
    value = text.strip()
    age = _AGE.fullmatch(value)
    if age:
        return now - datetime.timedelta(**{_UNITS[age.group(2)]: int(age.group(1))})
    try:
        when = datetime.datetime.fromisoformat(value)
    except ValueError:
        when = None
    if when is None or "T" not in value.upper() or when.tzinfo is None:
        raise WindowError(
            f"{text!r} is not a time: give RFC 3339 with an offset"
            " (2026-11-28T09:00:00Z) or an age (7d, 12h, 30m)"
        )
    return when.astimezone(datetime.UTC)


def record_kind(record: dict[str, Any]) -> str | None:
    """The job's kind: the reply's `kind`, else the job's."""
    kind = record.get("kind") or (record.get("job") or {}).get("kind")
    return kind if isinstance(kind, str) else None


@dataclass(frozen=True, slots=True)
class Window:
    since: datetime.datetime
    until: datetime.datetime | None = None
    kinds: frozenset[str] = field(default_factory=frozenset)
    families: frozenset[str] = field(default_factory=frozenset)
    sessions: frozenset[str] = field(default_factory=frozenset)

    def before(self, when: datetime.datetime | None) -> bool:
        """A record answered before the window (AMQP timestamps are whole seconds)."""
        return when is not None and when < self.since.replace(microsecond=0)

    def after(self, when: datetime.datetime | None) -> bool:
        return when is not None and self.until is not None and when > self.until

    def _filters(self) -> tuple[tuple[str, frozenset[str]], ...]:
        return (("kind", self.kinds), ("family", self.families), ("session_id", self.sessions))

    def excludes_headers(self, headers: dict[str, Any]) -> bool:
        """Excluded by a header alone (a header that is absent decides nothing)."""
        return any(
            wanted and name in headers and str(headers[name]) not in wanted
            for name, wanted in self._filters()
        )

    def admits(self, record: dict[str, Any]) -> bool:
        meta = record.get("meta") if isinstance(record.get("meta"), dict) else {}
        values = {
            "kind": record_kind(record),
            "family": (meta or {}).get("family"),
            "session_id": session_id_of(record.get("job")),
        }
        return all(not wanted or values[name] in wanted for name, wanted in self._filters())

    def describe(self) -> dict[str, Any]:
        return {
            "since": self.since.isoformat(),
            "until": self.until.isoformat() if self.until else None,
            "kinds": sorted(self.kinds),
            "families": sorted(self.families),
            "sessions": sorted(self.sessions),
        }
