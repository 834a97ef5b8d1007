"""Invariants every wire model must keep, whichever family declared it."""

import enum
import types
import typing
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

from schemas.job import Job


def _models(model: type[BaseModel], seen: set[type[BaseModel]]) -> Iterator[type[BaseModel]]:
    if model in seen:
        return
    seen.add(model)
    yield model
    for field in model.model_fields.values():
        for inner in _walk_types(field.annotation):
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                yield from _models(inner, seen)


def _walk_types(annotation: Any) -> Iterator[Any]:
    yield annotation
    for arg in typing.get_args(annotation):
        yield from _walk_types(arg)


def test_enum_fields_accept_their_string_values_in_python_mode() -> None:
    """The worker parses with orjson and validates in python mode (faster); a strict enum
    field would then reject "react" for Kind.REACT. Enum fields must be lax."""
    offenders = []
    for model in _models(Job, set()):
        for name, field in model.model_fields.items():
            enums = [
                t
                for t in _walk_types(field.annotation)
                if isinstance(t, type) and issubclass(t, enum.Enum)
            ]
            strict = [m for m in field.metadata if getattr(m, "strict", None) is not None]
            lax = any(m.strict is False for m in strict) or (
                not strict and model.model_config.get("strict") is not True
            )
            if enums and not lax:
                offenders.append(f"{model.__name__}.{name}")
    assert not offenders, f"enum fields must be declared with Field(strict=False): {offenders}"


def test_wire_models_ignore_unknown_fields_and_are_frozen() -> None:
    for model in _models(Job, set()):
        assert model.model_config.get("extra") in (None, "ignore"), model.__name__
        assert model.model_config.get("frozen") is True, model.__name__


def test_union_type_alias_compat() -> None:
    # types.UnionType is what `X | None` annotations produce; the walker must see inside.
    assert list(_walk_types(int | None))[1:] == [int, types.NoneType]
