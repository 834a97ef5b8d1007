"""Fixtures shared by the whole suite (each directory's conftest.py adds its own)."""

import pytest

from tests.data import CONFORMANCE
from worker.render.config import WorkerConfig, load_config
from worker.render.renderer import Renderer


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
