"""worker.yaml parsed once, read back by later runs (worker/render/config_cache.py):
the same configuration and the same errors as a fresh parse, never a stale or wrong
one."""

from pathlib import Path

import pytest
import yaml

from tests.data import BENCH_JOBS, CONFORMANCE
from worker.errors import ConfigError
from worker.masking import db_cache
from worker.render.config import load_config


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "cache"
    monkeypatch.setenv(db_cache.CACHE_ENV, str(directory))
    return directory


def cached_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("config-*.db"))


def refuse_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    def parse(text: str) -> None:
        raise AssertionError("parsed again")

    monkeypatch.setattr(yaml, "safe_load", parse)


@pytest.mark.parametrize(
    "path", [BENCH_JOBS / "worker.yaml", CONFORMANCE / "worker.yaml"], ids=["bench", "conformance"]
)
def test_a_second_load_reads_the_parse_back(
    cache: Path, path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh = load_config(path)
    assert len(cached_files(cache)) == 1
    refuse_parsing(monkeypatch)
    assert load_config(path) == fresh


def test_an_edited_file_is_parsed_again(cache: Path, tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text("mcp_servers:\n  a:\n    instructions: one\n")
    assert load_config(path).registry().get_instructions("a") == "one"
    path.write_text("mcp_servers:\n  a:\n    instructions: two\n")
    assert load_config(path).registry().get_instructions("a") == "two"
    assert len(cached_files(cache)) == 2


def test_a_damaged_copy_is_parsed_again(cache: Path, tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text("mcp_servers:\n  a:\n    instructions: hi\n")
    load_config(path)
    (stored,) = cached_files(cache)
    stored.write_bytes(stored.read_bytes()[:-3])
    assert load_config(path).registry().get_instructions("a") == "hi"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("mcp_servers: [unclosed\n", "not valid YAML"),
        # A date is not kept (marshal cannot hold it): the model's error, every time.
        ("mcp_servers:\n  a:\n    instructions: 2024-01-01\n", "mcp_servers.a.instructions"),
    ],
    ids=["not YAML", "a date"],
)
def test_errors_are_the_same_every_time(
    cache: Path, tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(text)
    errors = []
    for _ in range(2):
        with pytest.raises(ConfigError) as info:
            load_config(path)
        errors.append(str(info.value))
    assert errors[0] == errors[1]
    assert message in errors[0]
    assert cached_files(cache) == []


def test_switched_off_nothing_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(db_cache.CACHE_ENV, "")
    path = tmp_path / "w.yaml"
    path.write_text("mcp_servers:\n  a:\n    instructions: hi\n")
    assert load_config(path).registry().get_instructions("a") == "hi"
    assert load_config(path).registry().get_instructions("a") == "hi"
