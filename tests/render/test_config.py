"""worker.yaml loading: the MCP registry and clear errors."""

from pathlib import Path

import pytest

from tests.data import CONFORMANCE
from worker.errors import ConfigError
from worker.render.config import load_config, parse_config


def test_no_config_is_an_empty_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROMPT_WORKER_CONFIG", raising=False)
    config = load_config(None)
    assert dict(config.registry().instructions) == {}


def test_conformance_registry() -> None:
    registry = load_config(CONFORMANCE / "worker.yaml").registry()
    assert registry.get_instructions(
        "argocd-server",
    ).startswith("ArgoCD:")  # type: ignore[union-attr]
    assert registry.get_instructions("silent-server") == ""
    assert registry.get_instructions("nope") is None


def test_environment_variable_names_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "w.yaml"
    path.write_text("mcp_servers:\n  a:\n    instructions: hi\n")
    monkeypatch.setenv("PROMPT_WORKER_CONFIG", str(path))
    assert load_config().registry().get_instructions("a") == "hi"


def test_empty_file_is_the_empty_config(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text("")
    assert load_config(path).mcp_servers == {}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"mcp_servers": {"a": {"instructions": 3}}}, "mcp_servers.a.instructions"),
        ({"unknown_key": 1}, "unknown_key: unknown key"),
        (
            {"mcp_servers": {"a": {"instructons": "x"}}},
            "mcp_servers.a.instructons: unknown key (known: instructions)",
        ),
        (
            {"prompts": [{"id": "p", "instructons": "x"}]},
            "prompts.0.instructons: unknown key (known: ",
        ),
        ({"masking": {"patterns": [{"nmae": "x"}]}}, "did you mean 'name'?"),
        ([1, 2], "expected a mapping"),
    ],
)
def test_errors_name_the_source_and_field(data: object, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(data, "conf.yaml")
    assert str(info.value).startswith("conf.yaml: ")
    assert message in str(info.value)


def test_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(path)
