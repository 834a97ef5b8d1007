"""Which detectors can match which texts: one pass for all anchors of all detectors.

Most text holds no secret, so the cost that matters is deciding that. Python offers no
fast multi-literal search (each `in` is a separate pass; one alternation regex is
slower still), so when the `hyperscan` package is installed every text of a job is
scanned in a single pass over one buffer. Without it the anchors are checked with `in`
on an ASCII-lowered copy: the same answers, several times slower (see
bench/bench_masking.py).

Both engines fold ASCII case only, so they agree on every input; a test checks it.
"""

import threading
from bisect import bisect_right
from collections.abc import Sequence
from typing import Any, Protocol

import structlog

from worker.masking.detectors import Anchor

# Per text: anchor id -> start positions of its occurrences, or None when the engine
# only knows that it occurs.
Hits = dict[int, list[int] | None]

log = structlog.get_logger(__name__)

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_SEPARATOR = "\0"

try:  # optional accelerator
    import hyperscan as _hs  # type: ignore[import-not-found, unused-ignore]
except ImportError:  # pragma: no cover - depends on the environment
    _hs = None

HYPERSCAN_AVAILABLE = _hs is not None


def _ascii_lower(text: str) -> str:
    return text.lower() if text.isascii() else text.translate(_ASCII_LOWER)


class Prefilter(Protocol):
    engine: str

    def scan(self, texts: Sequence[str]) -> dict[int, Hits]:
        """{index of a text: the anchors it contains}, texts without any left out."""
        ...


class PythonPrefilter:
    engine = "python"

    def __init__(self, anchors: Sequence[Anchor]) -> None:
        self._caseless = [(i, a.literal.lower()) for i, a in enumerate(anchors) if a.caseless]
        self._exact = [(i, a.literal) for i, a in enumerate(anchors) if not a.caseless]

    def scan(self, texts: Sequence[str]) -> dict[int, Hits]:
        if not texts:
            return {}
        # One pass per anchor over everything first: usually nothing is found and the
        # per-text work is skipped.
        joined = _SEPARATOR.join(texts)
        exact = [(i, a) for i, a in self._exact if a in joined]
        caseless: list[tuple[int, str]] = []
        if self._caseless:
            lowered = _ascii_lower(joined)
            caseless = [(i, a) for i, a in self._caseless if a in lowered]
        if not exact and not caseless:
            return {}
        if len(texts) == 1:
            return {0: dict.fromkeys(i for i, _ in exact + caseless)}
        found: dict[int, Hits] = {}
        for index, text in enumerate(texts):
            ids = [i for i, a in exact if a in text]
            if caseless:
                low = _ascii_lower(text)
                ids.extend(i for i, a in caseless if a in low)
            if ids:
                found[index] = dict.fromkeys(ids)
        return found


def _on_match(anchor: int, start: int, end: int, flags: int, hits: list[tuple[int, int]]) -> None:
    hits.append((end, anchor))


class HyperscanPrefilter:
    engine = "hyperscan"

    def __init__(self, anchors: Sequence[Anchor]) -> None:
        assert _hs is not None
        self._empty = not anchors
        if self._empty:
            return
        flags = [_hs.HS_FLAG_CASELESS if a.caseless else 0 for a in anchors]
        database = _hs.Database(mode=_hs.HS_MODE_BLOCK)
        database.compile(
            expressions=[a.literal.encode("utf-8") for a in anchors],
            ids=list(range(len(anchors))),
            flags=flags,
            literal=True,
        )
        self._database: Any = database
        self._lengths = [len(a.literal.encode("utf-8")) for a in anchors]
        # Hyperscan scratch space may not be shared by concurrent scans: one per thread.
        self._local = threading.local()

    def _scratch(self) -> Any:
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            assert _hs is not None
            scratch = self._local.scratch = _hs.Scratch(self._database)
        return scratch

    def scan(self, texts: Sequence[str]) -> dict[int, Hits]:
        if self._empty or not texts:
            return {}
        # One buffer, one pass: a call per text would cost more than the scan itself.
        joined = texts[0] if len(texts) == 1 else _SEPARATOR.join(texts)
        hits: list[tuple[int, int]] = []
        self._database.scan(
            joined.encode("utf-8", "surrogatepass"),
            match_event_handler=_on_match,
            context=hits,
            scratch=self._scratch(),
        )
        if not hits:
            return {}
        # Start offset of each text in the buffer, to map hits to texts.
        all_ascii = joined.isascii()
        starts: list[int] = []
        offset = 0
        for text in texts:
            starts.append(offset)
            offset += (len(text) if all_ascii else len(text.encode("utf-8", "surrogatepass"))) + 1
        lengths = self._lengths
        found: dict[int, Hits] = {}
        for end, anchor in hits:
            index = bisect_right(starts, end - 1) - 1
            per_text = found.get(index)
            if per_text is None:
                per_text = found[index] = {}
            # Byte offsets are character offsets only in ASCII text; elsewhere the
            # detectors search for themselves.
            if not all_ascii and not texts[index].isascii():
                per_text[anchor] = None
                continue
            positions = per_text.get(anchor, [])
            if positions is not None:
                positions.append(end - lengths[anchor] - starts[index])
                per_text[anchor] = positions
        return found


def build(anchors: Sequence[Anchor], engine: str = "auto") -> Prefilter:
    """The fastest available prefilter (`auto`), or the one named."""
    if engine == "python" or (engine == "auto" and not HYPERSCAN_AVAILABLE):
        return PythonPrefilter(anchors)
    if engine in ("hyperscan", "auto"):
        if not HYPERSCAN_AVAILABLE:
            raise RuntimeError("the hyperscan package is not installed")
        try:
            return HyperscanPrefilter(anchors)
        except Exception as exc:  # e.g. a CPU without the instructions it needs
            if engine == "hyperscan":
                raise
            log.warning("masking_prefilter_fallback", engine="python", error=type(exc).__name__)
            return PythonPrefilter(anchors)
    raise ValueError(f"unknown prefilter engine {engine!r}")
