"""The masking stage's log events, with structlog imported on the first one.

Masking logs only when something goes wrong (a detector failed, an engine would not
start); importing structlog up front would make every `render` and `mask` pay for it.
"""

from typing import Any


def event(level: str, name: str, module: str, **fields: Any) -> None:
    """Log event `name` at `level` ("warning", "error") from logger `module`."""
    import structlog

    getattr(structlog.get_logger(module), level)(name, **fields)
