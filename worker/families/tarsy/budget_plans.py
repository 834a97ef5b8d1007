"""What a budget may cut from the TARSy family's jobs (CONTRACT.md §11), least
important first: the oldest chat exchanges, then the oldest events (conclusions last),
then the middles of the outside texts."""

from schemas.job import INVESTIGATION_KINDS, Job, Kind
from worker.families.budget import NOTHING, Path, Plan, events_section, history_section

_HISTORY = history_section("chat.history", ("chat", "history"))
_INVESTIGATION_EVENTS = events_section(
    "chat.investigation_events", ("chat", "investigation_events")
)
_STAGE_EVENTS = events_section("stage.previous_stage_events", ("stage", "previous_stage_events"))
_INVESTIGATION_TEXTS: tuple[tuple[str, Path], ...] = (
    ("session.alert_data", ("session", "alert_data")),
    ("session.runbook_content", ("session", "runbook_content")),
    ("stage.previous_stage_context", ("stage", "previous_stage_context")),
    ("stage.previous_attempt.previous_output", ("stage", "previous_attempt", "previous_output")),
)
_CHAT_PLAN = Plan(
    (_HISTORY, _INVESTIGATION_EVENTS),
    (("chat.investigation_context", ("chat", "investigation_context")),),
)
_INVESTIGATION_PLAN = Plan((_STAGE_EVENTS,), _INVESTIGATION_TEXTS)
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
}


def plan_for(job: Job) -> Plan:
    """What may be cut from `job`, by its kind (and chat mode)."""
    if job.kind in INVESTIGATION_KINDS:
        return _CHAT_PLAN if job.chat is not None else _INVESTIGATION_PLAN
    return _PLANS.get(job.kind, NOTHING)
