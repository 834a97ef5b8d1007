"""The seed's components.py: alert, runbook and chain-context sections.

Values are rendered with Python's own `str()` and `json.dumps` defaults (ASCII-escaped,
two-space indent), exactly as the seed's code does: the reference renderings were made
by running that code.
"""

import json
from collections.abc import Mapping
from typing import Any

from worker.families.legacy.templates import (
    ALERT_SECTION_TEMPLATE,
    NO_ALERT_DATA,
    NO_CHAIN_CONTEXT,
    NO_RUNBOOK,
    RUNBOOK_SECTION_TEMPLATE,
)


def format_alert_section(alert_data: Mapping[str, Any]) -> str:
    """AlertSectionTemplate.format."""
    return ALERT_SECTION_TEMPLATE.format(formatted_alert_data=format_alert_entries(alert_data))


def format_alert_entries(alert_data: Mapping[str, Any]) -> str:
    if not alert_data:
        return NO_ALERT_DATA
    lines = []
    for key, value in alert_data.items():
        formatted_key = key.replace("_", " ").title()
        lines.append(f"**{formatted_key}:** {format_alert_value(value)}")
    return "\n".join(lines)


def format_alert_value(value: Any) -> str:
    """Objects, arrays and strings that parse as JSON become fenced, indented JSON."""
    if isinstance(value, dict | list):
        return f"\n```json\n{json.dumps(value, indent=2)}\n```"
    if isinstance(value, str) and (value.startswith("{") or value.startswith("[")):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            return str(value)
        return f"\n```json\n{json.dumps(parsed, indent=2)}\n```"
    if isinstance(value, str) and "\n" in value:
        return f"\n```\n{value}\n```"
    return str(value) if value is not None else "N/A"


def format_runbook_section(runbook_content: str | None) -> str:
    """RunbookSectionTemplate.format."""
    content = runbook_content if runbook_content else NO_RUNBOOK
    return RUNBOOK_SECTION_TEMPLATE.format(runbook_content=content)


def format_chain_context(previous_stage_context: str | None) -> str:
    """ChainContextSectionTemplate.format.

    The seed asks a live chain context for its formatted text; producers send that text
    itself (CONTRACT.md §8), and an empty one means there were no earlier stage results.
    """
    return previous_stage_context if previous_stage_context else NO_CHAIN_CONTEXT
