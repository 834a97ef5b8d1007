"""The optional `budget` of a job (CONTRACT.md §11): how many prompt tokens its model takes.

Only the shape is checked here; whether the named tokenizer is installed is a fact of the
running worker, checked by the renderer (worker/render/budget/).
"""

from typing import Literal

from pydantic import Field

from schemas.base import NonEmptyStr, PositiveInt, WireModel

DEFAULT_TOKENIZER = "estimate"
Policy = Literal["cache", "tight"]
DEFAULT_POLICY: Policy = "cache"


class Budget(WireModel):
    max_prompt_tokens: PositiveInt = Field(
        description="The most prompt tokens the model may be sent: the sum, over the reply's "
        "messages, of the tokenizer's count of each message's content."
    )
    tokenizer: NonEmptyStr = Field(
        DEFAULT_TOKENIZER,
        description="'estimate' (ceil(characters / 4)), or 'cl100k_base' or 'o200k_base' "
        "(exact, as tiktoken counts) when their vocabularies are installed with the worker.",
    )
    policy: Policy = Field(
        DEFAULT_POLICY,
        description="'cache' (default): whole items and middles are cut in steps sized from "
        "the budget, so a growing session starts a new cut rarely and keeps its cached prompt "
        "prefix across calls; 'tight': as little is cut as fits, on every render.",
    )
