"""Memo of tool catalogues: producers send the same tool list job after job.

Validating a dozen tool schemas and turning them into ReAct text was a third of the
per-job time of a typical ReAct job, for output that only depends on the list's JSON.
The memo maps the list's JSON bytes to one validated list object, and that object to
its formatted text. Output is unaffected: equal JSON validates to equal tools, which
format to equal text. Bounded; cleared when full.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from schemas.job import Tool


@dataclass(slots=True)
class _Entry:
    tools: list[Tool]
    text: str | None = None


class ToolCatalogueMemo:
    def __init__(self, max_entries: int = 256) -> None:
        self.max_entries = max_entries
        self._by_json: dict[bytes, _Entry] = {}
        # id(list) -> entry. The entry holds the list, so its id cannot be reused by
        # another object while the entry exists; lookups still check identity.
        self._by_id: dict[int, _Entry] = {}

    def tools(self, key: bytes) -> list[Tool] | None:
        entry = self._by_json.get(key)
        return entry.tools if entry is not None else None

    def remember(self, key: bytes, tools: list[Tool]) -> None:
        if len(self._by_json) >= self.max_entries:
            self.clear()
        entry = _Entry(tools)
        self._by_json[key] = entry
        self._by_id[id(tools)] = entry

    def text(self, tools: Sequence[Tool]) -> str | None:
        entry = self._by_id.get(id(tools))
        if entry is not None and entry.tools is tools:
            return entry.text
        return None

    def remember_text(self, tools: Sequence[Tool], text: str) -> None:
        """Kept only for lists this memo handed out; other lists die with their job."""
        entry = self._by_id.get(id(tools))
        if entry is not None and entry.tools is tools:
            entry.text = text

    def clear(self) -> None:
        self._by_json.clear()
        self._by_id.clear()

    def __len__(self) -> int:
        return len(self._by_json)


CATALOGUES = ToolCatalogueMemo()
