"""Which fields of a job hold outside-world text, by payload: the masking stage's map.

A path is dotted attribute names; `[]` after a name walks every item of that list.
`TEXT` fields are strings; `DATA` fields are JSON values (objects, lists, strings)
whose string values are masked in place, keys and non-string values kept, and whose
keys say when a value is a credential (`{"password": "..."}`).

Deliberately absent: configured instructions (`custom_instructions`, prompt texts),
template text, and producer metadata such as tool names, descriptions and schemas.
Adding a payload is one entry here; tests check that every path exists in the models.
"""

from enum import Enum


class Shape(Enum):
    TEXT = "text"
    DATA = "data"


TEXT = Shape.TEXT
DATA = Shape.DATA

FIELDS: dict[str, tuple[tuple[str, Shape], ...]] = {
    "session": (
        ("session.alert_data", TEXT),
        ("session.runbook_content", TEXT),
    ),
    "stage": (
        ("stage.previous_stage_context", TEXT),
        ("stage.previous_stage_events[].content", TEXT),
        ("stage.previous_attempt.error_message", TEXT),
        ("stage.previous_attempt.previous_output", TEXT),
    ),
    "chat": (
        ("chat.user_question", TEXT),
        ("chat.investigation_context", TEXT),
        ("chat.investigation_events[].content", TEXT),
        ("chat.history[].user_question", TEXT),
        ("chat.history[].messages[].content", TEXT),
    ),
    "forced_conclusion": (),  # an iteration number and a strategy: no text
    "budget": (),  # a token count and a tokenizer's name: no text
    "mcp_summarization": (
        ("mcp_summarization.conversation_context", TEXT),
        ("mcp_summarization.result_text", TEXT),
    ),
    "executive_summary": (("executive_summary.final_analysis", TEXT),),
    "legacy": (
        ("legacy.alert_data", DATA),
        ("legacy.runbook_content", TEXT),
        ("legacy.previous_stage_context", TEXT),
        ("legacy.react_history", DATA),
        # Whole records: tool results and errors, partial analyses, call parameters.
        ("legacy.iteration_history", DATA),
    ),
    # The skill's content is configured instructions, its tools producer metadata.
    "skill_react": (),
    "skill_error_observation": (("skill_error_observation.error", TEXT),),
    # Goal, skills and additional instructions are configured or producer-written.
    "system_prompt": (),
}


def all_paths() -> list[tuple[str, Shape]]:
    return [entry for entries in FIELDS.values() for entry in entries]
