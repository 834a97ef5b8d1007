"""The browser of the drift page's tests serves the fleet page's too."""

from tests.rerender.conftest import browser

__all__ = ["browser"]
