"""What a budget may cut from the legacy family's jobs (CONTRACT.md §11): the oldest
ReAct history lines or iterations, whole, then the middles of the runbook and the chain
context."""

from typing import Any

from schemas.job import Job, Kind
from worker.families.budget import NOTHING, ItemTexts, ListSection, Plan


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
_RUNBOOK = ("legacy.runbook_content", ("legacy", "runbook_content"))
_CONTEXT = ("legacy.previous_stage_context", ("legacy", "previous_stage_context"))
_PLANS: dict[Kind, Plan] = {
    Kind.LEGACY_REACT: Plan((_REACT_HISTORY,), (_RUNBOOK, _CONTEXT)),
    Kind.LEGACY_STAGE_REACT: Plan((_REACT_HISTORY,), (_RUNBOOK, _CONTEXT)),
    Kind.LEGACY_FINAL_ANALYSIS: Plan(texts=(_RUNBOOK, _CONTEXT)),
    Kind.LEGACY_TOOL_SELECTION: Plan(texts=(_RUNBOOK,)),
    Kind.LEGACY_ITERATIVE_TOOL_SELECTION: Plan((_ITERATIONS,), (_RUNBOOK,)),
}


def plan_for(job: Job) -> Plan:
    return _PLANS.get(job.kind, NOTHING)
