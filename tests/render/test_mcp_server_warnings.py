"""A job naming MCP servers the registry lacks is rendered, and its reply says so."""

import json
from typing import Any

import pytest

from tests.data import CONFORMANCE, read_jsonl
from worker.render.renderer import Renderer

# A seed-000 investigation job of the conformance cases (registry: tests/conformance).
BASE = next(
    case["job"]
    for case in read_jsonl(CONFORMANCE / "cases.jsonl")
    if case["job"]["kind"] == "react" and "chat" not in case["job"]
)


def meta(renderer: Renderer, kind: str, servers: list[str]) -> dict[str, Any]:
    job = json.loads(json.dumps(BASE))
    job["kind"] = kind
    job["stage"]["mcp_servers"] = servers
    outcome = renderer.render(json.dumps(job).encode())
    assert outcome.status == "ok", outcome.body
    result: dict[str, Any] = json.loads(outcome.body)["meta"]
    return result


@pytest.mark.parametrize("kind", ["react", "native_thinking", "synthesis"])
def test_each_unknown_server_is_named_once_in_order(
    conformance_renderer: Renderer, kind: str
) -> None:
    servers = ["ghost-server", "kubernetes-server", "silent-server", "old-server", "ghost-server"]
    assert meta(conformance_renderer, kind, servers)["warnings"] == [
        "MCP server 'ghost-server' is not in the MCP server registry; "
        "its instructions are left out",
        "MCP server 'old-server' is not in the MCP server registry; its instructions are left out",
    ]


def test_known_servers_give_no_warning(conformance_renderer: Renderer) -> None:
    # silent-server is registered with empty instructions: known, so not a warning.
    servers = ["kubernetes-server", "silent-server"]
    assert meta(conformance_renderer, "react", servers)["warnings"] == []


def test_an_empty_registry_names_every_server(renderer: Renderer) -> None:
    warnings = meta(renderer, "react", ["kubernetes-server"])["warnings"]
    assert warnings == [
        "MCP server 'kubernetes-server' is not in the MCP server registry; "
        "its instructions are left out"
    ]
