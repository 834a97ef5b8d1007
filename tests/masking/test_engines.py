"""The prefilter's engines: which one runs, what happens when one is missing, and the
system-libhs binding (worker/masking/libhs.py) on its own."""

import os
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any, get_args

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from tests.masking.corpus.leaks import LEAKS, Leak
from tests.masking.corpus.positions import SECRET_CASES
from tests.unavailable import IN_CI, needs
from worker.errors import ConfigError
from worker.masking import libhs, prefilter
from worker.masking.config import MaskingConfig
from worker.masking.masker import Masker
from worker.render.config import load_config

needs_libhs = needs(prefilter.libhs_available, "libhyperscan5", "scripts/ensure-libhs installs it")


@pytest.mark.skipif(not IN_CI, reason="checks what CI installs")
def test_ci_runs_every_engine() -> None:
    """CI installs both accelerated engines (scripts/ensure-libhs, the wheel), so none of
    the engine tests is skipped there and the image's engine is the one tested."""
    assert prefilter.HYPERSCAN_AVAILABLE
    assert prefilter.libhs_available()


def test_auto_takes_the_fastest_engine_present() -> None:
    engine = Masker(MaskingConfig()).prefilter.engine
    if prefilter.libhs_available():
        assert engine == "libhs"
    elif prefilter.HYPERSCAN_AVAILABLE:
        assert engine == "hyperscan"
    else:
        assert engine == "python"


def test_config_offers_exactly_the_engines_the_prefilter_builds() -> None:
    annotation = MaskingConfig.model_fields["engine"].annotation
    assert get_args(annotation) == prefilter.ENGINES


def test_configured_engine_is_used(tmp_path: Path) -> None:
    path = tmp_path / "worker.yaml"
    path.write_text("masking:\n  engine: python\n", encoding="utf-8")
    config = load_config(path)
    assert Masker(config.masking).prefilter.engine == "python"


def test_unknown_engine_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "worker.yaml"
    path.write_text("masking:\n  engine: grep\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"masking\.engine"):
        load_config(path)


def test_named_engine_that_is_missing_refuses_to_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(libhs, "load", lambda: None)
    with pytest.raises(RuntimeError, match="libhs"):
        Masker(MaskingConfig(engine="libhs"))


def test_auto_without_libhs_uses_the_next_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(libhs, "load", lambda: None)
    engine = Masker(MaskingConfig()).prefilter.engine
    assert engine == ("hyperscan" if prefilter.HYPERSCAN_AVAILABLE else "python")


@needs_libhs
def test_auto_falls_back_when_libhs_fails_to_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any) -> None:
        raise libhs.LibhsError("expression 0: simulated")

    monkeypatch.setattr(libhs, "Database", broken)
    with capture_logs() as logs:
        masker = Masker(MaskingConfig())
    assert masker.prefilter.engine == ("hyperscan" if prefilter.HYPERSCAN_AVAILABLE else "python")
    assert [e["failed"] for e in logs if e["event"] == "masking_prefilter_fallback"] == ["libhs"]
    assert masker.mask_text("password: hunter2") == "password: [MASKED_PASSWORD]"


@needs_libhs
def test_libhs_masks_the_secret_corpus_like_plain_python() -> None:
    fast = Masker(MaskingConfig(groups=["secrets", "pii"]), engine="libhs")
    slow = Masker(MaskingConfig(groups=["secrets", "pii"]), engine="python")
    for case in SECRET_CASES:
        fast_counts: Counter[str] = Counter()
        slow_counts: Counter[str] = Counter()
        assert fast.mask_text(case["text"], fast_counts) == slow.mask_text(
            case["text"], slow_counts
        ), case["id"]
        assert fast_counts == slow_counts, case["id"]


ENGINES = [
    "python",
    *(["hyperscan"] if prefilter.HYPERSCAN_AVAILABLE else []),
    *(["libhs"] if prefilter.libhs_available() else []),
]
EVERY_GROUP = MaskingConfig(groups=["secrets", "pii"])
MASKERS = {engine: Masker(EVERY_GROUP, engine=engine) for engine in ENGINES}


@pytest.mark.parametrize("leak", LEAKS, ids=lambda leak: leak.id)
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_engine_masks_the_leak_corpus_alike(leak: Leak, data: st.DataObject) -> None:
    """The same text and the same counts from each engine (tests/masking/corpus/leaks.py;
    the benign corpus: tests/masking/test_properties.py)."""
    text = leak.render(data.draw(leak.secret, label="secret"))
    results = []
    for masker in MASKERS.values():
        counts: Counter[str] = Counter()
        results.append((masker.mask_text(text, counts), counts))
    assert all(result == results[0] for result in results[1:])


@needs_libhs
def test_libhs_database_reports_matches_with_their_end_offsets() -> None:
    library = libhs.load()
    assert library is not None
    database = libhs.Database(library, [b"token", b"sec\\d+"], [libhs.HS_FLAG_CASELESS, 0])
    assert database.scan(b"a TOKEN and sec42") == [(7, 0), (16, 1), (17, 1)]
    assert database.scan(b"nothing here") == []
    assert database.scan(b"") == []


@needs_libhs
def test_libhs_compile_error_names_the_expression() -> None:
    library = libhs.load()
    assert library is not None
    with pytest.raises(libhs.LibhsError, match=r"expression 1: .*"):
        libhs.Database(library, [b"fine", b"(unclosed"], [0, 0])


@needs_libhs
def test_libhs_scans_from_several_threads_at_once() -> None:
    """Scratch space is per thread: concurrent scans (the offload pool) keep their hits
    apart."""
    masker = Masker(MaskingConfig(), engine="libhs")
    texts = [f"line {i}\nDB_PASSWORD=s3cr3t-{i}\n" if i % 2 else f"plain {i}" for i in range(8)]
    expected = [masker.mask_text(text) for text in texts]
    failures: list[str] = []
    barrier = threading.Barrier(4)

    def work() -> None:
        barrier.wait()
        for _ in range(200):
            got = [masker.mask_text(text) for text in texts]
            if got != expected:
                failures.append(repr(got))
                return

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures
    assert expected[1] == "line 1\nDB_PASSWORD=[MASKED_PASSWORD]\n"


@needs_libhs
@pytest.mark.parametrize(
    ("named", "expected"),
    [
        ("", "libhs"),  # not set: the soname
        ("/nonexistent/libhs.so.5", "libhs"),  # missing: the next candidate
        ("libc.so.6", "libhs"),  # a library, but not Hyperscan: the next candidate
    ],
)
def test_libhs_location_can_be_named(named: str, expected: str) -> None:
    code = (
        "from worker.masking.masker import Masker\n"
        "from worker.masking.config import MaskingConfig\n"
        "print(Masker(MaskingConfig()).prefilter.engine)\n"
    )
    env = {**os.environ, "PROMPT_WORKER_LIBHS": named}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == expected


@needs_libhs
def test_libhs_named_by_path_is_loaded_from_there(tmp_path: Path) -> None:
    library = libhs.load()
    assert library is not None
    copy = tmp_path / "libhs-copy.so"
    copy.write_bytes(_resolved_libhs().read_bytes())
    code = "from worker.masking import libhs\nprint(libhs.load().cdll._name)\n"
    env = {**os.environ, "PROMPT_WORKER_LIBHS": str(copy)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == str(copy)


def _resolved_libhs() -> Path:
    """Where the linker finds libhs.so.5 (ldconfig's cache)."""
    listing = subprocess.run(
        ["/sbin/ldconfig", "-p"], capture_output=True, text=True, check=True
    ).stdout
    for line in listing.splitlines():
        if line.strip().startswith("libhs.so.5 "):
            return Path(line.split("=>")[-1].strip())
    raise AssertionError("libhs.so.5 is not in the linker's cache")
