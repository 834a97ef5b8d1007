"""Where a growing legacy session's prompt changes (CONTRACT.md §11.1).

Seed 001's templates put the growing material (the pre-formatted chain context, the
ReAct history, the iteration history) inside the user message, between fixed texts.
Each grows by appending (a later stage's text after the earlier ones', more lines, more
iterations), so it changes the message at its end; its placeholder ("No previous stage
data available.", no iterations yet) is replaced whole, so it changes it at its start.
The stable prefix ends at the first such change in template order, found in the user
message: the first occurrence of a text is at or before where the template put it, so
the promise holds even when the same text also appears earlier. An empty growing text
(no ReAct history yet) has no place to be found: when an earlier one was found, that one
ends the prefix anyway; else the whole user message is left out of the promise.
"""

from schemas.families import LegacyPayload
from schemas.job import Job, Kind
from worker.families.base import Messages, StablePoint
from worker.families.legacy.components import format_chain_context
from worker.families.legacy.formatting import format_iteration_history, format_react_history
from worker.families.legacy.templates import NO_CHAIN_CONTEXT, NO_ITERATIONS

USER = 1
_CHAIN_CONTEXT_KINDS = frozenset(
    {Kind.LEGACY_REACT, Kind.LEGACY_STAGE_REACT, Kind.LEGACY_FINAL_ANALYSIS}
)
_REACT_KINDS = frozenset({Kind.LEGACY_REACT, Kind.LEGACY_STAGE_REACT})


_PLACEHOLDERS = frozenset({NO_CHAIN_CONTEXT, NO_ITERATIONS})


def _growing_texts(kind: Kind, payload: LegacyPayload) -> list[str]:
    """The growing texts of the kind's user message, in the order its template has them."""
    texts = []
    if kind in _CHAIN_CONTEXT_KINDS:
        texts.append(format_chain_context(payload.previous_stage_context))
    if kind in _REACT_KINDS:
        texts.append(format_react_history(payload.react_history))
    if kind is Kind.LEGACY_ITERATIVE_TOOL_SELECTION:
        texts.append(format_iteration_history(payload.iteration_history))
    return texts


def stable_end(job: Job, messages: Messages) -> StablePoint:
    if job.legacy is None or len(messages) <= USER:
        return None
    texts = _growing_texts(job.kind, job.legacy)
    if not texts:
        return None
    user = messages[USER]["content"]
    found: int | None = None
    for text in texts:
        start = user.find(text) if text else -1
        if start < 0:
            break
        change = start if text in _PLACEHOLDERS else start + len(text)
        found = change if found is None else min(found, change)
    return USER, found or 0
