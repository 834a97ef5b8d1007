"""The generated documents shipped beside the wire-contract models (`schemas/`).

`prompt-worker schema` and `prompt-worker asyncapi` print these files instead of
generating them: generating means importing pydantic and building every model's
schema, several times the cost of the whole command otherwise. Tests keep the files
equal to a fresh generation. The `schemas` package is located without importing it
(its `__init__` imports the models).
"""

import importlib.util
from pathlib import Path


def shipped_text(filename: str) -> str | None:
    """The text of `schemas/<filename>` as installed, or None when it is not there."""
    spec = importlib.util.find_spec("schemas")
    if spec is None or not spec.submodule_search_locations:
        return None
    for directory in spec.submodule_search_locations:
        try:
            return (Path(directory) / filename).read_text(encoding="utf-8")
        except OSError:
            continue
    return None
