"""What a budgeted render reports: `meta.budget` and the facts metrics count."""

from dataclasses import dataclass, field
from typing import Any

from schemas.job import Job


@dataclass(frozen=True, slots=True)
class Elision:
    section: str
    items: int
    chars: int
    tokens: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "section": self.section,
            "items": self.items,
            "chars": self.chars,
            "tokens": self.tokens,
        }


@dataclass(frozen=True, slots=True)
class Fitted:
    """Messages within the budget. `counted` is False when the size alone proved the fit
    and nothing was tokenized: `prompt_tokens` is then an upper bound. `job` is the job
    the messages were built from (trimmed, or None when untouched); `message_tokens`
    each message's count, when counted."""

    messages: list[dict[str, str]]
    prompt_tokens: int
    counted: bool = True
    elisions: list[Elision] = field(default_factory=list)
    job: Job | None = None
    message_tokens: list[int] | None = None

    @property
    def trimmed(self) -> bool:
        return bool(self.elisions)

    @property
    def tokens_left_out(self) -> int:
        return sum(e.tokens for e in self.elisions)

    def meta(self, max_prompt_tokens: int, tokenizer: str) -> dict[str, Any]:
        return {
            "max_prompt_tokens": max_prompt_tokens,
            "tokenizer": tokenizer,
            "prompt_tokens": self.prompt_tokens,
            "counted": self.counted,
            "trimmed": self.trimmed,
            "elisions": [e.as_dict() for e in self.elisions],
        }


@dataclass(frozen=True, slots=True)
class OverBudget:
    """What may never be cut does not fit: `required` tokens against `allowed`."""

    required: int
    allowed: int
