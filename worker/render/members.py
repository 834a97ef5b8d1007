"""A `meta.warnings` entry for each member of a job the worker does not know.

The contract ignores unknown members so that producers can add fields before the
worker knows them (CONTRACT.md §2); a misspelt member ("tols" for "tools",
"stage.agent_nme" for "stage.agent_name") is ignored the same way, and would change the
prompt with nothing to say so. The warning names the member by its path and the nearest
known one; the job still renders.

Every object of the job that a model describes is checked (`stage`, `session`,
`chat.history[2]`, a payload's parts), none that the contract leaves free
(`tools[0].input_schema`, `legacy.alert_data`). The check is on the render's hot path:
an object whose members are all known costs one set operation, a list of such objects
one pass in C (`all(map(...))`), and a job walks only the members it has. A known tool
catalogue is cut out of the body before parsing (render/decode.py), so it costs nothing
here: a catalogue is only kept once its tools were found to have known members only.
"""

import types
import typing
from dataclasses import dataclass
from itertools import chain
from typing import Any, Literal

from pydantic import BaseModel

from schemas.job import Job

# A producer far ahead of the worker may add many members: a few are named, the rest
# counted, so the reply stays small.
MAX_NAMED = 10
_NAME_CHARS = 80

# How a model-typed member holds its objects: one, a list of them, a map to them.
Holding = Literal["one", "list", "map"]


@dataclass(frozen=True, slots=True)
class Shape:
    """The members a model knows, and those of its members that hold models."""

    known: frozenset[str]
    # name -> how the member holds its models, and their shape
    children: dict[str, tuple[Holding, "Shape"]]
    # The names of `children`: most objects have none of them, found in one set operation.
    child_names: frozenset[str]


def _held_model(annotation: Any) -> tuple[Holding, type[BaseModel]] | None:
    """How `annotation` holds a model, if it does (through Optional, Annotated, unions)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "one", annotation
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _held_model(args[0])
    if origin in (typing.Union, types.UnionType):
        for arg in args:
            held = _held_model(arg)
            if held is not None:
                return held
        return None
    if origin is list and args:
        inner = _held_model(args[0])
        return ("list", inner[1]) if inner is not None and inner[0] == "one" else None
    if origin is dict and len(args) == 2:
        inner = _held_model(args[1])
        return ("map", inner[1]) if inner is not None and inner[0] == "one" else None
    return None


def shape_of(model: type[BaseModel]) -> Shape:
    children = {}
    for name, field in model.model_fields.items():
        held = _held_model(field.annotation)
        if held is not None:
            children[name] = (held[0], shape_of(held[1]))
    return Shape(frozenset(model.model_fields), children, frozenset(children))


JOB_SHAPE = shape_of(Job)
KNOWN_MEMBERS = JOB_SHAPE.known
TOOL_SHAPE = JOB_SHAPE.children["tools"][1]

# An unknown member: the path of its object ("" for the job, else ending in "."), its
# name, and the names known there.
_Unknown = tuple[str, str, frozenset[str]]


def _all_known(data: dict[str, Any], shape: Shape) -> bool:
    """Whether every member of `data`, at any depth `shape` describes, is known: the
    check of every render, so it builds nothing and walks only the members present."""
    # `keys() <=` looks each member up in the set; `issuperset(data)` would first build
    # a set of the members.
    if not data.keys() <= shape.known:
        return False
    if shape.child_names.isdisjoint(data):
        return True
    for name in shape.child_names.intersection(data):
        value = data[name]
        holding, child = shape.children[name]
        if type(value) is dict:
            if holding == "one":
                # A leaf object (most are) without the cost of a call.
                if not (
                    _all_known(value, child) if child.child_names else value.keys() <= child.known
                ):
                    return False
            elif holding == "map":
                for item in value.values():
                    if type(item) is dict and not _all_known(item, child):
                        return False
        elif type(value) is list and holding == "list":
            if not child.child_names:
                # Every item's members in one set, built in C: an item that is not an
                # object fails it (or raises) and is looked at again, and let be, by
                # `_walk`; validation refuses it anyway.
                try:
                    if not child.known.issuperset(chain.from_iterable(value)):
                        return False
                except TypeError:
                    return False
            else:
                for item in value:
                    if type(item) is dict and not _all_known(item, child):
                        return False
    return True


def members_known(items: list[Any], shape: Shape) -> bool:
    """Whether every object of `items` (a list `shape` describes) has known members only."""
    return all(type(item) is dict and _all_known(item, shape) for item in items)


def _walk(data: dict[str, Any], shape: Shape, path: str, found: list[_Unknown]) -> None:
    """Every unknown member of `data`, at any depth `shape` describes, with its path."""
    known = shape.known
    found.extend((path, name, known) for name in data if name not in known)
    for name, value in data.items():
        held = shape.children.get(name)
        if held is None:
            continue
        holding, child = held
        if type(value) is dict and holding == "one":
            _walk(value, child, f"{path}{name}.", found)
        elif type(value) is dict and holding == "map":
            for key, item in value.items():
                if type(item) is dict:
                    _walk(item, child, f"{path}{name}.{key}.", found)
        elif type(value) is list and holding == "list":
            for index, item in enumerate(value):
                if type(item) is dict:
                    _walk(item, child, f"{path}{name}[{index}].", found)


def unknown_member_warnings(data: dict[str, Any]) -> list[str]:
    """One sentence per member of `data` (at any depth a model describes) that a job
    does not have, in the order they come."""
    if _all_known(data, JOB_SHAPE):  # every job but a few
        return []
    found: list[_Unknown] = []
    _walk(data, JOB_SHAPE, "", found)
    if not found:  # only items that are not objects, which validation refuses
        return []
    import difflib  # only a job with an unknown member needs it (start-up time)

    warnings = []
    for path, name, known in found[:MAX_NAMED]:
        shown = f"{path}{name}"
        if len(shown) > _NAME_CHARS:
            shown = shown[: _NAME_CHARS - 1] + "…"
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {path + close[0]!r}?" if close else ""
        warnings.append(f"unknown member {shown!r} of the job is ignored{hint}")
    if len(found) > MAX_NAMED:
        warnings.append(f"{len(found) - MAX_NAMED} more unknown members are ignored")
    return warnings
