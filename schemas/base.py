"""Shared base for wire models."""

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field


class WireModel(BaseModel):
    """Base of every model on the wire.

    Unknown fields are ignored so producers can add fields before the worker knows them
    (CONTRACT.md §2). Strict types: a number where text is expected is a producer bug that
    should be reported, not silently coerced.
    """

    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)


NonEmptyStr = Annotated[str, Field(min_length=1)]
PositiveInt = Annotated[int, Field(gt=0)]
