"""On-disk cache of compiled Hyperscan databases.

Compiling the masking prefilter's database is most of what building a masker costs,
which every `prompt-worker render` and `mask` run and every worker process pays at
start-up; reading a compiled copy back costs a small fraction of it
(docs/PERFORMANCE.md, "Command start-up").

One file per database, named after a hash of everything the compiled form depends on:
the expressions and their flags, the engine and its version, the machine type and the
CPU's instruction-set flags (Hyperscan compiles for the CPU it runs on). A file
holds a header, the SHA-256 of the payload and the payload, so a truncated or damaged
file is noticed and ignored; a payload the library still refuses (e.g. compiled on a
CPU with other vector instructions, over a shared home directory) is compiled again.
Writers write a private temporary file and rename it over the name, so concurrent
writers and readers only ever see whole files. Any failure to read or write the cache
is silent: it is only ever a shortcut. The same files, under their own name and
header, also keep parsed worker.yaml files (worker/render/config_cache.py).

Where: `$PROMPT_WORKER_CACHE_DIR` (empty: no cache), else `$XDG_CACHE_HOME/prompt-worker`,
else `~/.cache/prompt-worker`.
"""

import contextlib
import functools
import hashlib
import os
import platform
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

CACHE_ENV = "PROMPT_WORKER_CACHE_DIR"
# Each kind of file has its own header (and name prefix).
_MAGIC = {
    "hyperscan": b"prompt-worker hyperscan database v1\n",
    "config": b"prompt-worker parsed configuration v1\n",  # worker/render/config_cache.py
}
_DIGEST_SIZE = hashlib.sha256().digest_size

Database = TypeVar("Database")


def cache_dir() -> Path | None:
    """The cache directory, or None when caching is switched off."""
    configured = os.environ.get(CACHE_ENV)
    if configured is not None:
        return Path(configured) if configured else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "prompt-worker"


@functools.cache
def _cpu_flags() -> bytes:
    """The CPU's feature flags as the kernel lists them (Linux), else nothing."""
    try:
        with open("/proc/cpuinfo", "rb") as cpuinfo:
            for line in cpuinfo:
                if line.startswith((b"flags", b"Features")):
                    return line.strip()
    except OSError:
        pass
    return b""


def database_key(engine: str, expressions: list[bytes], flags: list[int]) -> str:
    """A name for the database compiled by `engine` (name and version) from these."""
    digest = hashlib.sha256()
    for part in (engine.encode(), platform.machine().encode(), _cpu_flags(), *expressions):
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)
    digest.update(repr(flags).encode())
    return digest.hexdigest()


def _path(directory: Path, key: str, kind: str) -> Path:
    return directory / f"{kind}-{key}.db"


def load(key: str, kind: str = "hyperscan") -> bytes | None:
    """The payload stored under `key`, or None when absent, unreadable or damaged."""
    directory = cache_dir()
    if directory is None:
        return None
    try:
        data = _path(directory, key, kind).read_bytes()
    except OSError:
        return None
    magic = _MAGIC[kind]
    header = len(magic) + _DIGEST_SIZE
    if not data.startswith(magic) or len(data) <= header:
        return None
    payload = data[header:]
    if hashlib.sha256(payload).digest() != data[len(magic) : header]:
        return None
    return payload


def store(key: str, payload: bytes, kind: str = "hyperscan") -> None:
    """Store `payload` under `key`; silently does nothing when that is not possible."""
    directory = cache_dir()
    if directory is None:
        return
    temporary = None
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(dir=directory, prefix=f".{kind}-", suffix=".tmp")
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(_MAGIC[kind] + hashlib.sha256(payload).digest() + payload)
        os.replace(temporary, _path(directory, key, kind))
        temporary = None
    except OSError:
        pass
    finally:
        if temporary is not None:
            with contextlib.suppress(OSError):
                os.unlink(temporary)


def cached(
    key: str,
    compile_: Callable[[], Database],
    serialize: Callable[[Database], bytes],
    read: Callable[[bytes], Database],
) -> Database:
    """The database under `key` read back with `read`, else compiled with `compile_` and
    stored (`serialize`). A stored copy that `read` refuses is compiled again."""
    payload = load(key)
    if payload is not None:
        try:
            return read(payload)
        except Exception:  # refused by the library: compile it again below
            pass
    database = compile_()
    # A database that cannot be serialized is simply not cached.
    with contextlib.suppress(Exception):
        store(key, serialize(database))
    return database
