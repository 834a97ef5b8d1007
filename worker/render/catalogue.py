"""Memo of tool catalogues: producers send the same tool list job after job.

Validating a dozen tool schemas and turning them into ReAct text was the largest part of
a typical ReAct job's time, for output that only depends on the list's JSON.
The memo maps the list's JSON bytes to one validated list object, and that object to
its formatted text. Output is unaffected: equal JSON validates to equal tools, which
format to equal text. Bounded; cleared when full.

Parsing the list costs more than validating it once it is memoised, so the memo also
learns how producers spell a catalogue in their bodies: `locate` finds a known spelling
as the value of a `"tools"` key that is the body's last member, and the renderer parses
the body with the catalogue cut out (see `decode.load_body`, which checks that the key
it found is the job's own). Only the last member: finding it costs a few byte
comparisons at the end of the body, where searching a body for the key cost more on jobs
without tools than the parse it saves on jobs with them (docs/PERFORMANCE.md,
"The builder"). CONTRACT.md §2 asks producers to put `tools` after `session` and `stage`, so
stage jobs qualify; a body with members after the catalogue (a chat job) is parsed
whole, as before. A spelling is learnt from the second job carrying the catalogue, so
jobs with one-off catalogues pay nothing for it.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field

import orjson

from schemas.job import Tool

_TOOLS_KEY = b'"tools":'
_JSON_SPACE = b" \t\n\r"
_CLOSING_BRACE = ord("}")
# Spellings are found by their last bytes; shorter catalogues are cheap to parse.
_SUFFIX = 64
# Learning a spelling parses part of the body: a few tries per catalogue at most.
_MAX_LEARN_ATTEMPTS = 3


@dataclass(slots=True)
class _Entry:
    tools: list[Tool]
    text: str | None = None
    learn_attempts: int = 0
    spellings: list[bytes] = field(default_factory=list)


class ToolCatalogueMemo:
    def __init__(self, max_entries: int = 256, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_entries = max_entries
        # Catalogues can be large (a job may be 32 MiB): the JSON and spellings kept are
        # bounded in bytes too, and a catalogue over a sixteenth of that is not kept.
        self.max_bytes = max_bytes
        self._bytes = 0
        self._by_json: dict[bytes, _Entry] = {}
        # id(list) -> entry. The entry holds the list, so its id cannot be reused by
        # another object while the entry exists; lookups still check identity.
        self._by_id: dict[int, _Entry] = {}
        # Last bytes of a known spelling -> (spelling, entry).
        self._by_suffix: dict[bytes, list[tuple[bytes, _Entry]]] = {}

    def tools(self, key: bytes) -> list[Tool] | None:
        entry = self._by_json.get(key)
        return entry.tools if entry is not None else None

    def remember(self, key: bytes, tools: list[Tool]) -> None:
        if len(key) > self.max_bytes // 16:
            return
        if len(self._by_json) >= self.max_entries or self._bytes + len(key) > self.max_bytes:
            self.clear()
        entry = _Entry(tools)
        self._by_json[key] = entry
        self._by_id[id(tools)] = entry
        self._bytes += len(key)

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

    def locate(self, body: bytes) -> tuple[int, int, list[Tool]] | None:
        """A known spelling of a catalogue as the value of a `"tools"` key that is the
        last member of `body`: where it starts and ends, and the validated list. Whether
        that member is the job's own (and not the last one of a nested object) is for
        the caller to check."""
        if not self._by_suffix:
            return None
        end = _last_value_end(body)
        for spelling, entry in self._by_suffix.get(body[end - _SUFFIX : end], ()):
            start = end - len(spelling)
            if start >= 0 and body.startswith(spelling, start) and _after_tools_key(body, start):
                return start, end, entry.tools
        return None

    def learn_spelling(self, body: bytes, key: bytes) -> None:
        """Remember how `body` spells the known catalogue whose JSON is `key`, if it is
        the body's last member, so that `locate` finds it in the next body spelt alike."""
        entry = self._by_json.get(key)
        if entry is None or len(key) < _SUFFIX or entry.learn_attempts >= _MAX_LEARN_ATTEMPTS:
            return
        entry.learn_attempts += 1
        end = _last_value_end(body)
        found = body.find(_TOOLS_KEY)
        while found >= 0:
            # From this key's value to the end of the last member: a spelling if these
            # bytes are one JSON value with the catalogue's JSON (orjson refuses
            # anything else, such as a nested key's value and what follows it).
            spelling = body[_value_start(body, found + len(_TOOLS_KEY)) : end]
            if len(spelling) >= _SUFFIX and _canonical(spelling) == key:
                if spelling not in entry.spellings and (
                    self._bytes + len(spelling) <= self.max_bytes
                ):
                    entry.spellings.append(spelling)
                    self._by_suffix.setdefault(spelling[-_SUFFIX:], []).append((spelling, entry))
                    self._bytes += len(spelling)
                return
            found = body.find(_TOOLS_KEY, found + 1)

    def spellings(self) -> int:
        """How many spellings `locate` knows (for tests and diagnostics)."""
        return sum(len(entries) for entries in self._by_suffix.values())

    def clear(self) -> None:
        self._by_json.clear()
        self._by_id.clear()
        self._by_suffix.clear()
        self._bytes = 0

    @property
    def bytes_kept(self) -> int:
        """Bytes of catalogue JSON and spellings held (for tests and diagnostics)."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._by_json)


def _value_start(body: bytes, index: int) -> int:
    """Past the JSON whitespace at `index`."""
    while body[index : index + 1] and body[index] in _JSON_SPACE:
        index += 1
    return index


def _space_before(body: bytes, index: int) -> int:
    """Back over the JSON whitespace that ends at `index`."""
    while index and body[index - 1] in _JSON_SPACE:
        index -= 1
    return index


def _last_value_end(body: bytes) -> int:
    """Where the value of an object body's last member ends (0 if the body does not
    end like an object)."""
    end = _space_before(body, len(body))
    if not end or body[end - 1] != _CLOSING_BRACE:
        return 0
    return _space_before(body, end - 1)


def _after_tools_key(body: bytes, start: int) -> bool:
    """Whether the value starting at `start` follows a `"tools":` key."""
    return body.endswith(_TOOLS_KEY, 0, _space_before(body, start))


def _canonical(spelling: bytes) -> bytes | None:
    """The JSON of a value as orjson writes it: equal for equal values (unlike `==`
    in Python, where 1 == 1.0 == True)."""
    try:
        return orjson.dumps(orjson.loads(spelling))
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        return None


CATALOGUES = ToolCatalogueMemo()
