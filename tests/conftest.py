"""Fixtures shared by the whole suite (each directory's conftest.py adds its own)."""

import pytest
from hypothesis import settings

from tests.data import CONFORMANCE
from tests.lanes import in_lane, lane
from tests.unavailable import pytest_runtest_setup as pytest_runtest_setup
from worker.render.config import WorkerConfig, load_config
from worker.render.renderer import Renderer

# pytest_runtest_setup (imported above): tests marked `broker` or `needs(...)` skip when
# it is missing, and fail under CI=true.

# One hypothesis profile wherever the suite runs: the same examples on every run
# (derandomized: a failure in CI fails again on a laptop), no deadline (the machines
# are shared; a slow example is not a failure), and a fixed number of examples for the
# tests that do not set their own.
settings.register_profile("suite", derandomize=True, deadline=None, max_examples=100)
settings.load_profile("suite")


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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a lane of scripts/test (tests/lanes.py), only that lane's tests run."""
    name = lane()
    if name is None:
        return
    kept: list[pytest.Item] = []
    left: list[pytest.Item] = []
    for item in items:
        (kept if in_lane(item.path, name) else left).append(item)
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = kept
