"""Fixtures shared by the whole suite."""

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from worker.render.config import WorkerConfig, load_config
from worker.render.renderer import Renderer

TESTS = Path(__file__).parent
REPO = TESTS.parent
CONFORMANCE = TESTS / "conformance"
BENCH_JOBS = TESTS / "bench_jobs"
# Reference material beside the repository; absent on a plain clone outside the workspace.
SHARED = REPO.parent / "shared"
SEED_000_KINDS = frozenset(
    {
        "react",
        "native_thinking",
        "synthesis",
        "forced_conclusion",
        "mcp_summarization",
        "executive_summary",
    }
)


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


@pytest.fixture(scope="session")
def conformance_config() -> WorkerConfig:
    return load_config(CONFORMANCE / "worker.yaml")


@pytest.fixture(scope="session")
def conformance_renderer(conformance_config: WorkerConfig) -> Renderer:
    return Renderer(conformance_config)


@pytest.fixture(scope="session")
def renderer() -> Renderer:
    """A renderer with an empty configuration (no MCP servers)."""
    return Renderer()
