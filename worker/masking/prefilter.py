"""Which detectors can match which texts: one pass for all anchors of all detectors.

Most text holds no secret, so the cost that matters is deciding that. Python offers no
fast multi-literal search (each `in` is a separate pass; one alternation regex is
slower still), so where Hyperscan is available every text of a job is scanned in a
single pass over one buffer: through the system's fat-runtime library (`libhs`, engine
"libhs") or the `hyperscan` wheel (engine "hyperscan"), the same database either way.
Without either the anchors are checked with `in` on an ASCII-lowered copy: the same
answers, several times slower (see bench/bench_masking.py).

All engines fold ASCII case only, so they agree on every input; tests check it.
"""

import threading
from bisect import bisect_right
from collections.abc import Callable, Sequence
from itertools import accumulate
from typing import Any, Protocol, TypeVar

from worker.masking import db_cache, libhs, log
from worker.masking.detectors import Anchor
from worker.masking.linear_regex import LinearSet

# Per text: anchor id -> start positions of its occurrences, or None when the engine
# only knows that it occurs.
Hits = dict[int, list[int] | None]

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_SEPARATOR = "\0"
_SEPARATOR_SIZE = len(_SEPARATOR)

_hs: Any
try:  # optional accelerator: a dependency on x86-64, absent elsewhere
    import hyperscan as _hs  # type: ignore[import-not-found, no-redef, unused-ignore]
except ImportError:  # pragma: no cover - depends on the environment
    _hs = None

HYPERSCAN_AVAILABLE = _hs is not None


def libhs_available() -> bool:
    """Whether the system's fat-runtime Hyperscan (see `libhs`) can be used here."""
    return libhs.load() is not None


def _ascii_lower(text: str) -> str:
    return text.lower() if text.isascii() else text.translate(_ASCII_LOWER)


class Prefilter(Protocol):
    engine: str

    def scan(self, texts: Sequence[str]) -> dict[int, Hits]:
        """{index of a text: the anchors it contains}, texts without any left out.
        Raises TypeError when an item is not a string."""
        ...


class PythonPrefilter:
    """Without Hyperscan: RE2's multi-pattern set (`LinearSet`), one pass over all texts
    and then one over each text where something was found. The same answers as
    Hyperscan: an anchor's literal, or its pattern (which holds the literal; a property
    test holds the engines equal), case folded in ASCII only."""

    engine = "python"

    def __init__(self, anchors: Sequence[Anchor]) -> None:
        expressions = [
            (_re2_escape(a.literal) if a.pattern is None else a.pattern, a.caseless)
            for a in anchors
        ]
        self._empty = not anchors
        if not self._empty:
            self._set = LinearSet(expressions)

    def scan(self, texts: Sequence[str]) -> dict[int, Hits]:
        if self._empty or not texts:
            return {}
        # One pass over everything first: usually nothing is found and the per-text
        # work is skipped. (A pattern never matches the separator.)
        joined = _SEPARATOR.join(texts)
        if not self._set.matching(joined):
            return {}
        if len(texts) == 1:
            return {0: dict.fromkeys(self._set.matching(joined))}
        found: dict[int, Hits] = {}
        for index, text in enumerate(texts):
            ids = self._set.matching(text)
            if ids:
                found[index] = dict.fromkeys(ids)
        return found


def _re2_escape(literal: str) -> str:
    return "".join(c if c.isalnum() or not c.isascii() else "\\" + c for c in literal)


def _hs_escape(literal: str) -> str:
    # Hyperscan takes PCRE syntax: escaping every non-alphanumeric ASCII character is
    # always valid there and makes it a literal.
    return "".join(c if c.isalnum() or not c.isascii() else "\\" + c for c in literal)


# Scans one buffer: (end offset, expression id) of each match, in the order found.
_ScanBuffer = Callable[[bytes], list[tuple[int, int]]]


def _on_match(anchor: int, start: int, end: int, flags: int, hits: list[tuple[int, int]]) -> None:
    hits.append((end, anchor))


def _wheel_scanner(expressions: list[bytes], flags: list[int]) -> _ScanBuffer:
    assert _hs is not None
    hs = _hs

    def compile_() -> Any:
        database = hs.Database(mode=hs.HS_MODE_BLOCK)
        database.compile(expressions=expressions, ids=list(range(len(expressions))), flags=flags)
        return database

    database = db_cache.cached(
        db_cache.database_key(f"hyperscan wheel {hs.__version__}", expressions, flags),
        compile_,
        hs.dumpb,
        lambda data: hs.loadb(data, hs.HS_MODE_BLOCK),
    )
    # Hyperscan scratch space may not be shared by concurrent scans: one per thread.
    local = threading.local()

    def scan(data: bytes) -> list[tuple[int, int]]:
        scratch = getattr(local, "scratch", None)
        if scratch is None:
            assert _hs is not None
            scratch = local.scratch = _hs.Scratch(database)
        hits: list[tuple[int, int]] = []
        database.scan(data, match_event_handler=_on_match, context=hits, scratch=scratch)
        return hits

    return scan


def _libhs_database(
    system: libhs.Library, expressions: list[bytes], flags: list[int]
) -> libhs.Database:
    return db_cache.cached(
        db_cache.database_key(f"libhs {system.version().decode()}", expressions, flags),
        lambda: libhs.Database(system, expressions, flags),
        libhs.Database.serialize,
        lambda data: libhs.Database(system, expressions, flags, serialized=data),
    )


# What a Hyperscan expression says about its anchor.
_EXACT = 0  # the anchor's pattern (or a pattern implying it) matched: the anchor holds
_LITERAL = 1  # an occurrence of a literal anchor: its position is worth keeping
_CANDIDATE = 2  # an occurrence of a split anchor's literal: holds if `confirm` agrees


class HyperscanPrefilter:
    """One Hyperscan pass over all texts. `library` says which build runs it: the
    `hyperscan` wheel's (engine "hyperscan") or the system's libhs (engine "libhs",
    faster where the wheel's baseline build lacks the CPU's vector instructions)."""

    def __init__(self, anchors: Sequence[Anchor], library: str = "wheel") -> None:
        self.engine = "libhs" if library == "libhs" else "hyperscan"
        self._empty = not anchors
        if self._empty:
            return
        expressions: list[bytes] = []
        flags: list[int] = []
        # Per expression: its anchor, what a hit means, and for a literal its length in
        # bytes, which tells where a hit starts (None for patterns).
        self._anchor: list[int] = []
        self._role: list[int] = []
        self._lengths: list[int | None] = []
        self._anchors = list(anchors)

        def add(anchor: int, expression: str, role: int, literal: str | None) -> None:
            expressions.append(expression.encode("utf-8"))
            flags.append(libhs.HS_FLAG_CASELESS if anchors[anchor].caseless else 0)
            self._anchor.append(anchor)
            self._role.append(role)
            self._lengths.append(None if literal is None else len(literal.encode("utf-8")))

        for i, a in enumerate(anchors):
            if a.split is not None:
                if a.split.quick is not None:
                    add(i, a.split.quick, _EXACT, None)
                if a.split.candidate is not None:  # where the literal starts is unknown
                    add(i, a.split.candidate, _CANDIDATE, None)
                else:
                    add(i, _hs_escape(a.literal), _CANDIDATE, a.literal)
            elif a.pattern is not None:
                add(i, a.pattern, _EXACT, None)
            else:
                add(i, _hs_escape(a.literal), _LITERAL, a.literal)
        if library == "libhs":
            system = libhs.load()
            if system is None:
                raise RuntimeError("the system's libhs (libhyperscan5) is not available")
            self._scan_buffer: _ScanBuffer = _libhs_database(system, expressions, flags).scan
        else:
            self._scan_buffer = _wheel_scanner(expressions, flags)

    def scan(self, texts: Sequence[str]) -> dict[int, Hits]:
        if self._empty or not texts:
            return {}
        # One buffer, one pass: a call per text would cost more than the scan itself.
        # (Joining one text returns it; a non-string raises TypeError, as documented.)
        joined = _SEPARATOR.join(texts)
        hits = self._scan_buffer(joined.encode("utf-8", "surrogatepass"))
        if not hits:
            return {}
        # Where each text ends in the buffer, to map hits to texts: `bounds[i]` is the
        # size of texts 0..i with one separator each (C-speed accumulate), so the text
        # holding a hit's last byte is the first i with bounds[i] > end. Only as far as
        # the last hit: hits usually sit in the first few texts.
        all_ascii = joined.isascii()
        sizes = (
            map(len, texts)
            if all_ascii
            else (len(t.encode("utf-8", "surrogatepass")) for t in texts)
        )
        last = hits[-1][0]
        bounds: list[int] = []
        for bound in accumulate(map(_SEPARATOR_SIZE.__add__, sizes)):
            bounds.append(bound)
            if bound > last:
                break
        anchor_of, role_of, lengths = self._anchor, self._role, self._lengths
        found: dict[int, Hits] = {}
        # (text, anchor) -> start positions, or None when they must be searched for.
        candidates: dict[tuple[int, int], list[int] | None] = {}
        for end, expression in hits:
            index = bisect_right(bounds, end)
            anchor, role = anchor_of[expression], role_of[expression]
            if role == _EXACT:
                found.setdefault(index, {})[anchor] = None
                continue
            # Where the literal starts in its text: byte offsets are character offsets
            # only in ASCII text; elsewhere it is searched for when needed.
            start: int | None = None
            length = lengths[expression]
            if length is not None and (all_ascii or texts[index].isascii()):
                start = end - length - (bounds[index - 1] if index else 0)
            if role == _CANDIDATE:
                _add_start(candidates, (index, anchor), start)
            else:
                _add_start(found.setdefault(index, {}), anchor, start)
        for (index, anchor), starts in candidates.items():
            if anchor in found.get(index, ()):
                continue  # already decided by its quick pattern
            text = texts[index]
            split = self._anchors[anchor].split
            assert split is not None
            if starts is None:
                starts = _find_all(text, self._anchors[anchor])
            if split.confirm(text, sorted(starts)):
                found.setdefault(index, {})[anchor] = None
        return found


_Key = TypeVar("_Key")


def _add_start(table: dict[_Key, list[int] | None], key: _Key, start: int | None) -> None:
    """Record where an occurrence starts; None for good once one start is unknown."""
    starts = table.get(key, [])
    if starts is None:
        return
    if start is None:
        table[key] = None
        return
    starts.append(start)
    table[key] = starts


def _find_all(text: str, anchor: Anchor) -> list[int]:
    """Start positions of the anchor's literal in `text` (ASCII case folded if caseless)."""
    haystack = _ascii_lower(text) if anchor.caseless else text
    needle = anchor.literal.lower() if anchor.caseless else anchor.literal
    found: list[int] = []
    pos = haystack.find(needle)
    while pos >= 0:
        found.append(pos)
        pos = haystack.find(needle, pos + 1)
    return found


ENGINES = ("auto", "libhs", "hyperscan", "python")


def build(anchors: Sequence[Anchor], engine: str = "auto") -> Prefilter:
    """The fastest available prefilter (`auto`), or the one named.

    `auto` prefers the system's fat-runtime libhs, then the `hyperscan` wheel, then
    plain Python; an engine that fails to start (e.g. a CPU without the instructions
    it needs) is logged and the next one is used. A named engine fails instead.
    """
    if engine not in ENGINES:
        raise ValueError(f"unknown prefilter engine {engine!r}")
    if engine == "python":
        return PythonPrefilter(anchors)
    if engine == "libhs":
        return HyperscanPrefilter(anchors, library="libhs")
    if engine == "hyperscan":
        if not HYPERSCAN_AVAILABLE:
            raise RuntimeError("the hyperscan package is not installed")
        return HyperscanPrefilter(anchors)
    candidates = (["libhs"] if libhs_available() else []) + (
        ["wheel"] if HYPERSCAN_AVAILABLE else []
    )
    for library in candidates:
        try:
            return HyperscanPrefilter(anchors, library=library)
        except Exception as exc:
            log.event(
                "warning",
                "masking_prefilter_fallback",
                __name__,
                failed=library,
                error=type(exc).__name__,
            )
    return PythonPrefilter(anchors)
