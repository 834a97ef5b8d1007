"""Fixtures of the masking tests."""

import pytest

from worker.masking.config import MaskingConfig
from worker.render.config import WorkerConfig
from worker.render.renderer import Renderer


@pytest.fixture(scope="session")
def unmasked_renderer() -> Renderer:
    """A renderer with masking switched off: what a prompt holds without it."""
    return Renderer(WorkerConfig(masking=MaskingConfig(enabled=False)))
