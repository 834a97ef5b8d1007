"""The investigation-context formatter for chat sessions (seed `FormatInvestigationContext`)."""

from collections.abc import Sequence

from schemas.job import TimelineEvent
from worker.families.tarsy.templates import SEPARATOR

_HEADER = f"{SEPARATOR}\n📋 INVESTIGATION HISTORY\n{SEPARATOR}\n\n# Original Investigation\n\n"

# Event type -> text written before the event's content.
_PREFIXES = {
    "llm_thinking": "**Internal Reasoning:**\n\n",
    "llm_response": "**Agent Response:**\n\n",
    "tool_call": "**Tool Call:** ",
    "tool_result": "**Observation:**\n\n",
    "final_analysis": "**Final Analysis:**\n\n",
}


def investigation_context_parts(events: Sequence[TimelineEvent]) -> list[str]:
    """The pieces of the investigation context, for callers that join them into more.

    Its header holds an emoji, which makes CPython store the whole joined text at four
    bytes a character: joining once, into the final message, avoids copying that wide
    text once per intermediate string.
    """
    parts = [_HEADER]
    append = parts.append
    for event in events:
        prefix = _PREFIXES.get(event.event_type)
        if prefix is None:
            prefix = "**" + event.event_type.replace("_", " ") + ":**\n\n"
        append(prefix)
        append(event.content)
        append("\n\n")
    return parts


def format_investigation_context(events: Sequence[TimelineEvent]) -> str:
    return "".join(investigation_context_parts(events))
