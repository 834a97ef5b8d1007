"""What a budget may cut in each family's jobs, in which order (CONTRACT.md §11).

A plan names the job's lists whose oldest items may be left out whole (in cut order, the
least important first) and the texts whose middle may be left out when that is not
enough. Whatever a plan does not name is never cut: system messages, instructions,
templates, tool catalogues, `chat.user_question`, the goal block, the rerun header. Only
material the kind actually renders is named, so every cut shortens the prompt.

Plans work on the job, not on the rendered text: the trimmed job goes through the
family's own builder, so a trimmed prompt is built by the very code (and to the very
format) of an untrimmed one, and a marker stands where the material was, as an item
of the same list (an event, an exchange, a line) or inside the shortened text.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from schemas.job import (
    INVESTIGATION_KINDS,
    ChatExchange,
    Job,
    Kind,
    TimelineEvent,
)
from worker.render.budget.edits import Path

# Event types that hold conclusions: cut only after every other event (CONTRACT.md §11).
CONCLUSION_EVENTS = frozenset({"final_analysis", "executive_summary"})
# The event type of a marker standing for left-out events; the formatters label an
# unknown type by its name ("### left out", "**left out:**").
MARKER_EVENT_TYPE = "left_out"

ItemTexts = list[tuple[Path, str]]


def _never(item: Any) -> bool:
    return False


def _no_parts(item: Any) -> list[str] | None:
    return None


@dataclass(frozen=True, slots=True)
class ListSection:
    """A list whose oldest items may be left out whole; its last item never is."""

    name: str  # as reported in meta.budget.elisions, e.g. "chat.history"
    path: Path
    noun: str  # what one item is called in the marker
    marker: Callable[[str], Any]  # an item holding the marker text
    piece: Callable[[Any], str]  # an item's text, for its size
    texts: Callable[[Any], ItemTexts]  # an item's texts a middle cut may shorten
    last_resort: Callable[[Any], bool] = _never  # items cut only after all others
    # The texts whose concatenation is `piece`, when it is made of several that the
    # prompt shows apart (an exchange's question and answers); None: `piece` is one.
    parts: Callable[[Any], list[str] | None] = _no_parts


@dataclass(frozen=True, slots=True)
class Plan:
    lists: tuple[ListSection, ...] = ()
    texts: tuple[tuple[str, Path], ...] = ()  # (name, path) of texts a middle cut may shorten


def _event_marker(text: str) -> TimelineEvent:
    return TimelineEvent(event_type=MARKER_EVENT_TYPE, content=text)


def _event_piece(event: TimelineEvent) -> str:
    return event.content


def _event_texts(event: TimelineEvent) -> ItemTexts:
    return [(("content",), event.content)]


def _is_conclusion(event: TimelineEvent) -> bool:
    return event.event_type in CONCLUSION_EVENTS


def _events(name: str, path: Path) -> ListSection:
    return ListSection(
        name, path, "event", _event_marker, _event_piece, _event_texts, _is_conclusion
    )


def _exchange_marker(text: str) -> ChatExchange:
    return ChatExchange(user_question=text, messages=[])


def _exchange_piece(exchange: ChatExchange) -> str:
    return exchange.user_question + "".join(m.content for m in exchange.messages)


def _exchange_parts(exchange: ChatExchange) -> list[str]:
    return [exchange.user_question, *(m.content for m in exchange.messages)]


def _exchange_texts(exchange: ChatExchange) -> ItemTexts:
    texts: ItemTexts = [(("user_question",), exchange.user_question)]
    texts.extend((("messages", i, "content"), m.content) for i, m in enumerate(exchange.messages))
    return texts


def _line_piece(entry: str | list[str]) -> str:
    return entry if isinstance(entry, str) else "\n".join(entry)


def _line_texts(entry: str | list[str]) -> ItemTexts:
    if isinstance(entry, str):
        return [((), entry)]
    return [((i,), line) for i, line in enumerate(entry)]


def _iteration_marker(text: str) -> dict[str, Any]:
    return {"partial_analysis": text}


def _iteration_piece(iteration: dict[str, Any]) -> str:
    return str(iteration)


def _iteration_texts(iteration: dict[str, Any]) -> ItemTexts:
    analysis = iteration.get("partial_analysis")
    return [(("partial_analysis",), analysis)] if isinstance(analysis, str) else []


_HISTORY = ListSection(
    "chat.history",
    ("chat", "history"),
    "exchange",
    _exchange_marker,
    _exchange_piece,
    _exchange_texts,
    parts=_exchange_parts,
)
_INVESTIGATION_EVENTS = _events("chat.investigation_events", ("chat", "investigation_events"))
_STAGE_EVENTS = _events("stage.previous_stage_events", ("stage", "previous_stage_events"))
_REACT_HISTORY = ListSection(
    "legacy.react_history",
    ("legacy", "react_history"),
    "line",
    lambda text: text,
    _line_piece,
    _line_texts,
)
_ITERATIONS = ListSection(
    "legacy.iteration_history",
    ("legacy", "iteration_history"),
    "iteration",
    _iteration_marker,
    _iteration_piece,
    _iteration_texts,
)

_INVESTIGATION_TEXTS: tuple[tuple[str, Path], ...] = (
    ("session.alert_data", ("session", "alert_data")),
    ("session.runbook_content", ("session", "runbook_content")),
    ("stage.previous_stage_context", ("stage", "previous_stage_context")),
    ("stage.previous_attempt.previous_output", ("stage", "previous_attempt", "previous_output")),
)
_LEGACY_RUNBOOK = ("legacy.runbook_content", ("legacy", "runbook_content"))
_LEGACY_CONTEXT = ("legacy.previous_stage_context", ("legacy", "previous_stage_context"))

_PLANS: dict[Kind, Plan] = {
    Kind.MCP_SUMMARIZATION: Plan(
        texts=(
            (
                "mcp_summarization.conversation_context",
                ("mcp_summarization", "conversation_context"),
            ),
            ("mcp_summarization.result_text", ("mcp_summarization", "result_text")),
        )
    ),
    Kind.EXECUTIVE_SUMMARY: Plan(
        texts=(("executive_summary.final_analysis", ("executive_summary", "final_analysis")),)
    ),
    Kind.LEGACY_REACT: Plan((_REACT_HISTORY,), (_LEGACY_RUNBOOK, _LEGACY_CONTEXT)),
    Kind.LEGACY_STAGE_REACT: Plan((_REACT_HISTORY,), (_LEGACY_RUNBOOK, _LEGACY_CONTEXT)),
    Kind.LEGACY_FINAL_ANALYSIS: Plan(texts=(_LEGACY_RUNBOOK, _LEGACY_CONTEXT)),
    Kind.LEGACY_TOOL_SELECTION: Plan(texts=(_LEGACY_RUNBOOK,)),
    Kind.LEGACY_ITERATIVE_TOOL_SELECTION: Plan((_ITERATIONS,), (_LEGACY_RUNBOOK,)),
    Kind.SKILL_ERROR_OBSERVATION: Plan(
        texts=(("skill_error_observation.error", ("skill_error_observation", "error")),)
    ),
}
_CHAT_PLAN = Plan(
    (_HISTORY, _INVESTIGATION_EVENTS),
    (("chat.investigation_context", ("chat", "investigation_context")),),
)
_INVESTIGATION_PLAN = Plan((_STAGE_EVENTS,), _INVESTIGATION_TEXTS)
_NOTHING = Plan()


def plan_for(job: Job) -> Plan:
    """What may be cut from `job`, by its kind (and chat mode)."""
    if job.kind in INVESTIGATION_KINDS:
        return _CHAT_PLAN if job.chat is not None else _INVESTIGATION_PLAN
    return _PLANS.get(job.kind, _NOTHING)
