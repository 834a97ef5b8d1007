"""The seed's LangChainPromptBuilder methods, one function each, over the `legacy` payload.

The payload stands in for the seed's PromptContext; `available_tools` is
`{"tools": payload.tools}` (CONTRACT.md §8).
"""

import json
from collections.abc import Sequence
from typing import Any

from schemas.families import LegacyPayload
from worker.families.legacy.components import (
    format_alert_section,
    format_chain_context,
    format_runbook_section,
)
from worker.families.legacy.formatting import (
    format_available_actions,
    format_iteration_history,
    format_react_history,
)
from worker.families.legacy.templates import (
    ANALYSIS_QUESTION_TEMPLATE,
    CONTEXT_SECTION_TEMPLATE,
    FINAL_ANALYSIS_PROMPT_TEMPLATE,
    ITERATIVE_MCP_TOOL_SELECTION_TEMPLATE,
    MCP_TOOL_SELECTION_TEMPLATE,
    REACT_SYSTEM_TEMPLATE,
    STAGE_ANALYSIS_QUESTION_TEMPLATE,
    STANDARD_REACT_PROMPT_TEMPLATE,
)

# The seed's iterative selection falls back to this many iterations when none is set.
DEFAULT_MAX_ITERATIONS = 5

ReactHistory = Sequence[str | Sequence[str]] | None


def get_enhanced_react_system_message(composed_instructions: str, task_focus: str) -> str:
    return REACT_SYSTEM_TEMPLATE.format(
        composed_instructions=composed_instructions, task_focus=task_focus
    )


def _alert_type(context: LegacyPayload) -> Any:
    alert_data = context.alert_data
    return alert_data.get("alert_type", alert_data.get("alert", "Unknown Alert"))


def _react_prompt(context: LegacyPayload, question: str, react_history: ReactHistory) -> str:
    return STANDARD_REACT_PROMPT_TEMPLATE.format(
        available_actions=format_available_actions(context.tools),
        question=question,
        history_text=format_react_history(react_history),
    )


def build_standard_react_prompt(context: LegacyPayload, react_history: ReactHistory) -> str:
    question = ANALYSIS_QUESTION_TEMPLATE.format(
        alert_type=_alert_type(context),
        alert_section=format_alert_section(context.alert_data),
        runbook_section=format_runbook_section(context.runbook_content),
        chain_context=format_chain_context(context.previous_stage_context),
    )
    return _react_prompt(context, question, react_history)


def build_stage_analysis_react_prompt(context: LegacyPayload, react_history: ReactHistory) -> str:
    stage_name = context.stage_name or "analysis"
    question = STAGE_ANALYSIS_QUESTION_TEMPLATE.format(
        alert_type=_alert_type(context),
        alert_section=format_alert_section(context.alert_data),
        runbook_section=format_runbook_section(context.runbook_content),
        chain_context=format_chain_context(context.previous_stage_context),
        stage_name=stage_name.upper(),
    )
    return _react_prompt(context, question, react_history)


def build_stage_info(context: LegacyPayload) -> str:
    """The final-analysis stage lines; empty when the job names no stage."""
    if not context.stage_name:
        return ""
    stage_info = f"\n**Stage:** {context.stage_name}"
    if context.is_final_stage:
        stage_info += " (Final Analysis Stage)"
    if context.previous_stages:
        stage_info += f"\n**Previous Stages:** {', '.join(context.previous_stages)}"
    return stage_info + "\n"


def build_context_section(context: LegacyPayload) -> str:
    return CONTEXT_SECTION_TEMPLATE.format(
        agent_name=context.agent_name, server_list=", ".join(context.mcp_servers)
    )


def build_final_analysis_prompt(context: LegacyPayload) -> str:
    return FINAL_ANALYSIS_PROMPT_TEMPLATE.format(
        stage_info=build_stage_info(context),
        context_section=build_context_section(context),
        alert_section=format_alert_section(context.alert_data),
        runbook_section=format_runbook_section(context.runbook_content),
        chain_context=format_chain_context(context.previous_stage_context),
    )


def _available_tools_json(context: LegacyPayload) -> str:
    # json.dumps defaults on purpose (ASCII escapes, ", " and ": "): the seed's own call.
    return json.dumps({"tools": context.tools}, indent=2)


def build_mcp_tool_selection_prompt(context: LegacyPayload) -> str:
    return MCP_TOOL_SELECTION_TEMPLATE.format(
        server_guidance=context.server_guidance,
        alert_section=format_alert_section(context.alert_data),
        runbook_section=format_runbook_section(context.runbook_content),
        available_tools=_available_tools_json(context),
    )


def display_max_iterations(current_iteration: int, max_iterations: int | None) -> int:
    """The iteration cap shown to the model; never below the current iteration."""
    limit = max_iterations or DEFAULT_MAX_ITERATIONS
    return limit if current_iteration <= limit else current_iteration


def build_iterative_mcp_tool_selection_prompt(context: LegacyPayload) -> str:
    return ITERATIVE_MCP_TOOL_SELECTION_TEMPLATE.format(
        current_iteration=context.current_iteration,
        server_guidance=context.server_guidance,
        alert_section=format_alert_section(context.alert_data),
        runbook_section=format_runbook_section(context.runbook_content),
        available_tools=_available_tools_json(context),
        iteration_history=format_iteration_history(context.iteration_history),
        max_iterations=display_max_iterations(context.current_iteration, context.max_iterations),
    )
