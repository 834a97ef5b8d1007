"""The reply the worker publishes (CONTRACT.md §3).

The worker serialises replies straight from dicts with orjson (this is the hot path);
these models describe that output for the JSON Schema, the AsyncAPI document and for
clients that want typed replies (`parse_reply`).
"""

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from schemas.codes import ErrorCode

__all__ = [
    "BudgetMeta",
    "CacheBreakpoint",
    "CacheMeta",
    "Elision",
    "ErrorCode",
    "ErrorDetail",
    "ErrorInfo",
    "ErrorReply",
    "Message",
    "OkReply",
    "Reply",
    "ReplyMeta",
    "parse_reply",
]


class _ReplyModel(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class Message(_ReplyModel):
    role: Literal["system", "user", "assistant"]
    content: str


class Elision(_ReplyModel):
    section: str = Field(description="What was cut, e.g. chat.history or session.alert_data.")
    items: int = Field(
        description="Whole items left out (events, exchanges, lines), or 1 for the middle of a "
        "text."
    )
    chars: int = Field(description="Characters left out.")
    tokens: int = Field(
        description="Tokens left out by the budget's tokenizer (material far beyond the budget "
        "is not tokenized: its count is scaled from the counted material's ratio)."
    )


class BudgetMeta(_ReplyModel):
    max_prompt_tokens: int
    tokenizer: str
    prompt_tokens: int = Field(
        description="The reply's size by the tokenizer: exact when `counted`, else an upper "
        "bound that proved the fit without tokenizing."
    )
    counted: bool = Field(description="Whether `prompt_tokens` was counted by the tokenizer.")
    trimmed: bool = Field(description="Whether anything was left out to fit.")
    elisions: list[Elision] = Field(default_factory=list)


class CacheBreakpoint(_ReplyModel):
    """A point of the prompt: a breakpoint, or where the cuts begin."""

    message: int = Field(description="Index of the message the point is in.")
    chars: int = Field(
        description="Characters (Unicode code points) of that message before the point."
    )
    tokens: int = Field(
        description="Tokens of the prompt before the point, by `tokenizer`: the counts "
        "of the messages before it plus that of the message's first `chars` characters."
    )


class CacheMeta(_ReplyModel):
    breakpoints: list[CacheBreakpoint] = Field(
        description="At most 4, in prompt order. On a later render of the same session that "
        "only grew (more history exchanges, investigation events, previous-stage events, "
        "earlier stages), the prompt is byte for byte the same up to each breakpoint, unless "
        "that render cuts differently (its meta.budget.elisions differ): then only up to the "
        "breakpoints at or before the earlier of the two renders' `cut` points. The last one "
        "ends the longest prefix the worker can promise (CONTRACT.md §11.1)."
    )
    tokenizer: str = Field(description="The budget's tokenizer, else 'estimate'.")
    stable_tokens: int = Field(description="Tokens before the last breakpoint (0 if none).")
    prompt_tokens: int = Field(description="Tokens of the whole prompt, by the same tokenizer.")
    cut: CacheBreakpoint | None = Field(
        description="Where this render's cuts begin: the first point at which its prompt "
        "departs from the job's whole prompt; null when nothing is cut. A render whose "
        "meta.budget.elisions differ from the session's previous render's starts a new cut: "
        "the previous render's breakpoints at or before the earlier of the two `cut` points "
        "still hold, and a provider's cache restarts after them (CONTRACT.md §11.1)."
    )


class ReplyMeta(_ReplyModel):
    template_version: str = Field(
        description="Stable hash of the template set of the job's family; changes when any "
        "template text of that family changes."
    )
    family: str = Field(description="Prompt family: tarsy, legacy, skill or system_prompt.")
    worker_version: str
    render_ms: float = Field(description="Time spent building the messages, in milliseconds.")
    prompt_chars: int = Field(description="Characters in all messages together.")
    masked: dict[str, int] = Field(
        default_factory=dict, description="Secrets masked before rendering, counted by detector."
    )
    warnings: list[str] = Field(default_factory=list)
    budget: BudgetMeta | None = Field(
        None, description="Present whenever the job has a budget (CONTRACT.md §11)."
    )
    cache: CacheMeta = Field(
        description="Cache breakpoints: how much of the prompt the session's next render "
        "repeats, and where a new cut restarts the cache (CONTRACT.md §11.1)."
    )


class OkReply(_ReplyModel):
    job_id: str
    status: Literal["ok"]
    kind: str
    messages: list[Message]
    meta: ReplyMeta


class ErrorDetail(_ReplyModel):
    field: str = Field(description="Dotted path of the offending field ('' for the whole body).")
    type: str = Field(description="Machine-readable error type, e.g. missing, string_type.")
    message: str


class ErrorInfo(_ReplyModel):
    code: ErrorCode
    message: str
    details: list[ErrorDetail] = Field(default_factory=list)


class ErrorReply(_ReplyModel):
    job_id: str | None = Field(description="The job's id, or null when it could not be read.")
    status: Literal["error"]
    kind: str | None = Field(None, description="The job's kind when it could be read.")
    error: ErrorInfo


Reply = Annotated[OkReply | ErrorReply, Field(discriminator="status")]
_reply_adapter: TypeAdapter[OkReply | ErrorReply] = TypeAdapter(Reply)


def parse_reply(data: bytes | str | dict[str, Any]) -> OkReply | ErrorReply:
    """Parse a reply published by the worker into its typed model."""
    if isinstance(data, dict):
        return _reply_adapter.validate_python(data)
    return _reply_adapter.validate_json(data)
