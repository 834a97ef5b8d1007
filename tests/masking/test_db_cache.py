"""The on-disk cache of compiled Hyperscan databases (worker/masking/db_cache.py):
what is read back scans as a fresh compilation does, and a damaged, refused or
unwritable cache costs a compilation, never a wrong or failed masker."""

import threading
from collections import Counter
from pathlib import Path

import pytest

from tests.masking.test_engines import needs_libhs
from worker.masking import db_cache, libhs, prefilter
from worker.masking.config import MaskingConfig
from worker.masking.masker import Masker

TEXT = "DB_PASSWORD=q7-Wx-91-zz and Authorization: Bearer 9f8e7d6c5b4a39281706f5e4\n"
ENGINES = [
    pytest.param(
        "hyperscan",
        marks=pytest.mark.skipif(not prefilter.HYPERSCAN_AVAILABLE, reason="no hyperscan wheel"),
    ),
    pytest.param("libhs", marks=needs_libhs),
]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "cache"
    monkeypatch.setenv(db_cache.CACHE_ENV, str(directory))
    return directory


def masked(masker: Masker) -> tuple[str, Counter[str]]:
    counts: Counter[str] = Counter()
    return masker.mask_text(TEXT, counts), counts


def files(directory: Path) -> list[Path]:
    return sorted(directory.glob("hyperscan-*.db"))


@pytest.mark.parametrize("engine", ENGINES)
def test_a_cached_database_masks_as_a_compiled_one(cache: Path, engine: str) -> None:
    compiled = Masker(MaskingConfig(), engine=engine)
    assert len(files(cache)) == 1
    cached = Masker(MaskingConfig(), engine=engine)
    assert cached.prefilter.engine == engine
    assert masked(cached) == masked(compiled)
    assert "[MASKED_PASSWORD]" in masked(cached)[0]


@pytest.mark.parametrize("engine", ENGINES)
def test_the_second_masker_reads_instead_of_compiling(
    cache: Path, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    Masker(MaskingConfig(), engine=engine)
    reads: list[str] = []
    original = db_cache.load

    def load(key: str) -> bytes | None:
        payload = original(key)
        reads.append(key if payload else "")
        return payload

    def no_compile(*args: object, **kwargs: object) -> None:
        raise AssertionError("compiled although a cached copy exists")

    monkeypatch.setattr(db_cache, "load", load)
    monkeypatch.setattr(libhs.Database, "_compile", no_compile)
    if prefilter._hs is not None:
        wheel = prefilter._hs

        class WheelWithoutCompiling:
            Database = staticmethod(no_compile)

            def __getattr__(self, name: str) -> object:
                return getattr(wheel, name)

        monkeypatch.setattr(prefilter, "_hs", WheelWithoutCompiling())
    masker = Masker(MaskingConfig(), engine=engine)
    assert reads and all(reads)
    assert "[MASKED_PASSWORD]" in masked(masker)[0]


def test_different_patterns_get_different_files(cache: Path) -> None:
    Masker(MaskingConfig())
    Masker(MaskingConfig(groups=["secrets", "pii"]))
    assert len(files(cache)) == 2


@pytest.mark.parametrize("damage", ["truncate", "flip", "refused"])
def test_a_damaged_file_is_compiled_again_and_replaced(cache: Path, damage: str) -> None:
    expected = masked(Masker(MaskingConfig()))
    [path] = files(cache)
    key = path.name.removeprefix("hyperscan-").removesuffix(".db")
    good = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(good[: len(good) // 2])
    elif damage == "flip":
        path.write_bytes(good[:-10] + bytes([good[-10] ^ 0xFF]) + good[-9:])
    else:  # a whole cache file whose payload the library refuses
        db_cache.store(key, b"not a hyperscan database" * 10)
    assert masked(Masker(MaskingConfig())) == expected
    assert db_cache.load(key) not in (None, b"not a hyperscan database" * 10)


def test_load_ignores_what_is_not_a_whole_cache_file(cache: Path) -> None:
    db_cache.store("k", b"payload")
    assert db_cache.load("k") == b"payload"
    path = cache / "hyperscan-k.db"
    data = path.read_bytes()
    for broken in (b"", data[:-1], data[:20], b"x" + data[1:], data + b"tail"):
        path.write_bytes(broken)
        assert db_cache.load("k") is None
    assert db_cache.load("absent") is None


def test_empty_cache_dir_switches_caching_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(db_cache.CACHE_ENV, "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    assert db_cache.cache_dir() is None
    assert "[MASKED_PASSWORD]" in masked(Masker(MaskingConfig()))[0]
    assert list(tmp_path.rglob("*.db")) == []


def test_default_place_follows_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(db_cache.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert db_cache.cache_dir() == tmp_path / "xdg" / "prompt-worker"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert db_cache.cache_dir() == tmp_path / ".cache" / "prompt-worker"


def test_a_cache_path_that_is_a_file_still_gives_a_masker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(db_cache.CACHE_ENV, str(blocker / "cache"))
    assert "[MASKED_PASSWORD]" in masked(Masker(MaskingConfig()))[0]


def test_concurrent_writers_and_readers_see_whole_files_only(cache: Path) -> None:
    payloads = [bytes([n]) * (200_000 + n) for n in range(4)]
    seen: list[bytes | None] = []
    stop = threading.Event()

    def write(payload: bytes) -> None:
        while not stop.is_set():
            db_cache.store("shared", payload)

    def read() -> None:
        for _ in range(300):
            seen.append(db_cache.load("shared"))

    writers = [threading.Thread(target=write, args=(p,)) for p in payloads]
    for thread in writers:
        thread.start()
    try:
        read()
    finally:
        stop.set()
        for thread in writers:
            thread.join()
    assert all(item is None or item in payloads for item in seen)
    assert any(item in payloads for item in seen)
    assert not list(cache.glob(".hyperscan-*"))  # no temporary file left behind
