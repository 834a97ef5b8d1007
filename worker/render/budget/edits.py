"""Reading and replacing one value deep inside a frozen job, without copying the rest.

A path is a tuple of attribute names (models), keys (dicts) and indexes (lists). A
replacement copies only the containers on the path: the job's other fields, a
catalogue's tool list above all, stay the very same objects.
"""

from typing import Any

from pydantic import BaseModel

from worker.families.budget import Path


def get_at(value: Any, path: Path) -> Any:
    for step in path:
        if value is None:
            return None
        if isinstance(value, BaseModel):
            assert isinstance(step, str)
            value = getattr(value, step)
        else:
            value = value[step]
    return value


def set_at(value: Any, path: Path, new: Any) -> Any:
    """`value` with the thing at `path` replaced by `new`."""
    if not path:
        return new
    step, rest = path[0], path[1:]
    if isinstance(value, BaseModel):
        assert isinstance(step, str)
        return value.model_copy(update={step: set_at(getattr(value, step), rest, new)})
    if isinstance(value, list):
        assert isinstance(step, int)
        copy = list(value)
        copy[step] = set_at(copy[step], rest, new)
        return copy
    assert isinstance(value, dict)
    updated = dict(value)
    updated[step] = set_at(updated[step], rest, new)
    return updated
