"""Token counters of CONTRACT.md §11, by name.

`estimate` is TARSy's heuristic, ceil(characters / 4), and costs nothing. Any other name
is a tiktoken encoding whose vocabulary is installed (vocabularies.py); tiktoken is
imported, and the vocabulary read and checked, on the first job that names it, never at
start-up: most commands and most jobs need neither.
"""

import threading
from collections.abc import Sequence
from typing import Protocol

from schemas.budget import DEFAULT_TOKENIZER

# tiktoken's cl100k_base splitting expression (as tiktoken 0.14 has it), at whose line
# seams counts add up (pieces.py; tests/render/budget/test_pieces.py).
LINE_SEAM_PATTERNS = frozenset(
    {
        r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"
        r"|\s++$|\s*[\r\n]|\s+(?!\S)|\s"
    }
)


class Tokenizer(Protocol):
    name: str
    # Whether counts add up across a seam after "\n" before a visible character
    # (pieces.py): a prompt can then be counted from its pieces' counts.
    line_seams: bool

    def count(self, text: str) -> int:
        """Tokens in `text`."""
        ...

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """Tokens in each text, in order."""
        ...

    def at_most(self, text: str, tight: bool = False) -> int:
        """An upper bound of `count(text)` that costs no tokenizing; `tight` spends a
        little more time on a closer one."""
        ...


class UnavailableTokenizer(ValueError):
    """A tokenizer name that is not available in this installation."""

    def __init__(self, name: str, available: Sequence[str]) -> None:
        self.name = name
        self.available = list(available)
        super().__init__(
            f"tokenizer {name!r} is not available; available: {', '.join(self.available)}"
        )


class EstimateTokenizer:
    """ceil(len(text) / 4): code points, as seed 003 counts them."""

    name = DEFAULT_TOKENIZER
    line_seams = False  # ceil() does not add up; counting costs nothing anyway

    def count(self, text: str) -> int:
        return -(-len(text) // 4)

    def count_many(self, texts: Sequence[str]) -> list[int]:
        return [-(-len(text) // 4) for text in texts]

    def at_most(self, text: str, tight: bool = False) -> int:
        return -(-len(text) // 4)


class TiktokenTokenizer:
    """An exact count by a tiktoken encoding. Special-token text counts as ordinary text,
    as a provider counts a prompt that happens to contain it."""

    def __init__(self, name: str, encoding: "_Encoding") -> None:
        self.name = name
        self._encoding = encoding
        # Additivity at line seams is a property of the splitting expression (pieces.py),
        # proven and tested for cl100k_base's only; any other counts whole.
        self.line_seams = getattr(encoding, "_pat_str", None) in LINE_SEAM_PATTERNS

    def count(self, text: str) -> int:
        return len(self._encoding.encode_ordinary(text))

    def count_many(self, texts: Sequence[str]) -> list[int]:
        encode = self._encoding.encode_ordinary
        return [len(encode(text)) for text in texts]

    def at_most(self, text: str, tight: bool = False) -> int:
        # Every token of an ordinary encoding stands for at least one UTF-8 byte, and a
        # code point takes at most four; encoding a wide text to measure it costs time.
        if text.isascii():
            return len(text)
        return len(text.encode("utf-8", "surrogatepass")) if tight else 4 * len(text)


class _Encoding(Protocol):
    def encode_ordinary(self, text: str) -> list[int]: ...


_ESTIMATE = EstimateTokenizer()
_loaded: dict[str, Tokenizer] = {_ESTIMATE.name: _ESTIMATE}
_lock = threading.Lock()


def available() -> list[str]:
    """Names a job may give: `estimate` and every installed tiktoken vocabulary."""
    from worker.render.budget import vocabularies

    return [_ESTIMATE.name, *sorted(vocabularies.installed())]


def get(name: str) -> Tokenizer:
    """The tokenizer `name`, loaded once per process. Raises UnavailableTokenizer."""
    tokenizer = _loaded.get(name)
    if tokenizer is not None:
        return tokenizer
    from worker.render.budget import vocabularies

    with _lock:
        tokenizer = _loaded.get(name)
        if tokenizer is not None:
            return tokenizer
        file = vocabularies.installed().get(name)
        if file is None:
            raise UnavailableTokenizer(name, available())
        try:
            encoding = vocabularies.load(name, file)
        except (OSError, vocabularies.VocabularyError):
            raise UnavailableTokenizer(name, available()) from None
        tokenizer = _loaded[name] = TiktokenTokenizer(name, encoding)
        return tokenizer
