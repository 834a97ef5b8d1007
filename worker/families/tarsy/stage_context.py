"""The previous-stage context formatter (CONTRACT.md §6; not in the seed)."""

from collections.abc import Sequence

from schemas.job import TimelineEvent

STAGE_EVENT_LABELS = {
    "llm_thinking": "LLM Thinking",
    "llm_response": "LLM Response",
    "tool_call": "Tool Call",
    "tool_result": "Tool Result",
    "final_analysis": "Analysis",
    "executive_summary": "Executive Summary",
}


def format_stage_context(events: Sequence[TimelineEvent]) -> str:
    if not events:
        return ""
    parts = ["<!-- STAGE_CONTEXT_START -->\n"]
    for event in events:
        label = STAGE_EVENT_LABELS.get(event.event_type) or event.event_type.replace("_", " ")
        parts.append(f"### {label}\n\n{event.content}\n\n")
    parts.append("<!-- STAGE_CONTEXT_END -->")
    return "".join(parts)
