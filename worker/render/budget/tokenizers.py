"""Token counters of CONTRACT.md §11, by name.

`estimate` is TARSy's heuristic, ceil(characters / 4), and costs nothing. `cl100k_base`
and `o200k_base` are tiktoken encodings whose vocabularies are installed with the
`tokenizers` extra (vocabularies.py); tiktoken is imported, and the vocabulary read and
checked, on the first job that names it, never at start-up: most commands and most jobs
need neither. tiktoken counts them (docs/BUDGETS.md, "Sizing a budget per model": it was
measured against the Rust BPE of `bpe-openai`).
"""

import threading
from collections.abc import Sequence
from typing import Protocol

from schemas.budget import DEFAULT_TOKENIZER


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

    def __init__(self, name: str, encoding: "_Encoding", line_seams: bool) -> None:
        self.name = name
        self.encoding = encoding
        # Additivity at line seams is a property of the splitting expression (pieces.py;
        # vocabularies.EncodingSpec.line_seams).
        self.line_seams = line_seams

    def count(self, text: str) -> int:
        return len(self.encoding.encode_ordinary(text))

    def count_many(self, texts: Sequence[str]) -> list[int]:
        encode = self.encoding.encode_ordinary
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
    """Names a job may give: `estimate` and every encoding whose vocabulary (and tiktoken)
    is installed."""
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
        except (OSError, ImportError, vocabularies.VocabularyError):
            raise UnavailableTokenizer(name, available()) from None
        spec = vocabularies.ENCODINGS[name]
        tokenizer = _loaded[name] = TiktokenTokenizer(name, encoding, spec.line_seams)
        return tokenizer
