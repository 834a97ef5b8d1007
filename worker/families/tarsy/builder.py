"""Entry points of the seed-000 (TARSy) family: one message list per kind.

Mirrors the seed's `PromptBuilder`: ReAct, native-thinking and synthesis messages,
the forced-conclusion prompt, MCP summarization and executive-summary prompts.
"""

from types import MappingProxyType

from schemas.job import Chat, Job, Kind, Stage, Strategy
from worker.families.base import (
    NO_TOOL_TEXTS,
    BuildResult,
    Family,
    Messages,
    RenderContext,
    ToolTexts,
    probe_renderings,
    template_version,
)
from worker.families.mcp_servers import MCPServerRegistry
from worker.families.tarsy.budget_plans import plan_for
from worker.families.tarsy.chat import build_chat_user_message
from worker.families.tarsy.components import (
    format_alert_section,
    format_chain_context,
    format_previous_attempt,
    format_runbook_section,
)
from worker.families.tarsy.growth import stable_end
from worker.families.tarsy.instructions import (
    compose_chat_instructions,
    compose_investigation_instructions,
)
from worker.families.tarsy.investigation_context import investigation_context_parts
from worker.families.tarsy.stage_context import format_stage_context
from worker.families.tarsy.templates import (
    ALL_TEMPLATES,
    ANALYSIS_TASK,
    EXECUTIVE_SUMMARY_SYSTEM_PROMPT,
    EXECUTIVE_SUMMARY_USER_TEMPLATE,
    FOCUS_LINE,
    FORCED_CONCLUSION_TEMPLATE,
    MCP_SUMMARIZATION_SYSTEM_TEMPLATE,
    MCP_SUMMARIZATION_USER_TEMPLATE,
    NATIVE_THINKING_FORCED_CONCLUSION_FORMAT,
    REACT_FORCED_CONCLUSION_FORMAT,
    REACT_FORMAT_INSTRUCTIONS,
    SYNTHESIS_SYSTEM_TASK,
    SYNTHESIS_TASK,
)
from worker.families.tarsy.tools import available_tools_preamble


def previous_stage_context(stage: Stage) -> str:
    """The stage's pre-formatted context, or its events through the stage formatter."""
    if stage.previous_stage_context is not None:
        return stage.previous_stage_context
    if stage.previous_stage_events is not None:
        return format_stage_context(stage.previous_stage_events)
    return ""


def investigation_context(chat: Chat) -> list[str]:
    """The chat's investigation context as pieces: pre-formatted, or from its events."""
    if chat.investigation_events is not None:
        return investigation_context_parts(chat.investigation_events)
    return [chat.investigation_context or ""]


def _context_sections(job: Job, alert_type: str) -> str:
    """Alert, runbook, chain context and (on a rerun) the previous attempt."""
    session, stage = job.session, job.stage
    text = (
        format_alert_section(alert_type, session.alert_data)
        + "\n"
        + format_runbook_section(session.runbook_content)
        + "\n"
        + format_chain_context(previous_stage_context(stage))
        + "\n"
    )
    if stage.previous_attempt is not None:
        text += format_previous_attempt(stage.previous_attempt) + "\n"
    return text


def build_investigation_user_message(
    job: Job, with_tools: bool, tool_texts: ToolTexts = NO_TOOL_TEXTS
) -> str:
    tools = available_tools_preamble(job.tools, tool_texts) if with_tools else ""
    return tools + _context_sections(job, job.session.alert_type) + ANALYSIS_TASK


def build_synthesis_user_message(job: Job) -> str:
    # The seed passes an empty alert type to the synthesis alert section.
    return (
        "Synthesize the investigation results and provide recommendations.\n\n"
        + _context_sections(job, "")
        + SYNTHESIS_TASK
    )


def _composed_instructions(job: Job, ctx: RenderContext) -> str:
    """Investigation or chat composition, by whether the job is a chat follow-up."""
    stage = job.stage
    compose = (
        compose_chat_instructions if job.chat is not None else compose_investigation_instructions
    )
    return compose(ctx.registry, stage.mcp_servers, stage.custom_instructions)


def _user_message(job: Job, ctx: RenderContext, with_tools: bool) -> str:
    if job.chat is not None:
        tools = job.tools if with_tools else ()
        return build_chat_user_message(
            job.chat, investigation_context(job.chat), tools, ctx.tool_texts
        )
    return build_investigation_user_message(job, with_tools, ctx.tool_texts)


def build_react_messages(job: Job, ctx: RenderContext) -> Messages:
    system = f"{_composed_instructions(job, ctx)}\n\n{REACT_FORMAT_INSTRUCTIONS}\n\n{FOCUS_LINE}"
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": _user_message(job, ctx, with_tools=True)},
    ]


def build_native_thinking_messages(job: Job, ctx: RenderContext) -> Messages:
    # No format instructions and no tool text: tools travel as native function declarations.
    return [
        {"role": "system", "content": f"{_composed_instructions(job, ctx)}\n\n{FOCUS_LINE}"},
        {"role": "user", "content": _user_message(job, ctx, with_tools=False)},
    ]


def build_synthesis_messages(job: Job, ctx: RenderContext) -> Messages:
    stage = job.stage
    composed = compose_investigation_instructions(
        ctx.registry, stage.mcp_servers, stage.custom_instructions
    )
    system = f"{composed}\n\n{SYNTHESIS_SYSTEM_TASK}\n\n{FOCUS_LINE}"
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": build_synthesis_user_message(job)},
    ]


def build_forced_conclusion_prompt(iteration: int, strategy: Strategy) -> str:
    instructions = (
        REACT_FORCED_CONCLUSION_FORMAT
        if strategy is Strategy.REACT
        else NATIVE_THINKING_FORCED_CONCLUSION_FORMAT
    )
    return FORCED_CONCLUSION_TEMPLATE % (iteration, instructions)


def build_mcp_summarization_system_prompt(
    server_name: str, tool_name: str, max_summary_tokens: int
) -> str:
    return MCP_SUMMARIZATION_SYSTEM_TEMPLATE % (server_name, tool_name, max_summary_tokens)


def build_mcp_summarization_user_prompt(
    conversation_context: str, server_name: str, tool_name: str, result_text: str
) -> str:
    return MCP_SUMMARIZATION_USER_TEMPLATE % (
        conversation_context,
        server_name,
        tool_name,
        result_text,
    )


def build_executive_summary_user_prompt(final_analysis: str) -> str:
    return EXECUTIVE_SUMMARY_USER_TEMPLATE % (final_analysis,)


# The kinds whose system message composes the stage's MCP server instructions.
_COMPOSES_INSTRUCTIONS = frozenset({Kind.REACT, Kind.NATIVE_THINKING, Kind.SYNTHESIS})


def build(job: Job, ctx: RenderContext) -> BuildResult:
    kind = job.kind
    messages: Messages
    if kind is Kind.REACT:
        messages = build_react_messages(job, ctx)
    elif kind is Kind.NATIVE_THINKING:
        messages = build_native_thinking_messages(job, ctx)
    elif kind is Kind.SYNTHESIS:
        messages = build_synthesis_messages(job, ctx)
    elif kind is Kind.FORCED_CONCLUSION:
        assert job.forced_conclusion is not None  # guaranteed by kind_rule_violations
        payload = job.forced_conclusion
        messages = [
            {
                "role": "user",
                "content": build_forced_conclusion_prompt(payload.iteration, payload.strategy),
            }
        ]
    elif kind is Kind.MCP_SUMMARIZATION:
        assert job.mcp_summarization is not None
        summary = job.mcp_summarization
        messages = [
            {
                "role": "system",
                "content": build_mcp_summarization_system_prompt(
                    summary.server_name, summary.tool_name, summary.max_summary_tokens
                ),
            },
            {
                "role": "user",
                "content": build_mcp_summarization_user_prompt(
                    summary.conversation_context,
                    summary.server_name,
                    summary.tool_name,
                    summary.result_text,
                ),
            },
        ]
    elif kind is Kind.EXECUTIVE_SUMMARY:
        assert job.executive_summary is not None
        messages = [
            {"role": "system", "content": EXECUTIVE_SUMMARY_SYSTEM_PROMPT},
            {
                "role": "user",
                "content": build_executive_summary_user_prompt(
                    job.executive_summary.final_analysis
                ),
            },
        ]
    else:
        raise ValueError(f"kind {kind.value!r} is not built by the tarsy family")
    if kind in _COMPOSES_INSTRUCTIONS:
        return BuildResult(messages, ctx.registry.missing(job.stage.mcp_servers))
    return BuildResult(messages)


# Jobs that between them reach every branch of every component, so that section text
# written inline in the components (headings, markers) is versioned as well as the
# constants: the template version moves whenever any of it changes.
_PROBE_EVENTS = [
    {"event_type": t, "content": "c"}
    for t in (
        "llm_thinking",
        "llm_response",
        "tool_call",
        "tool_result",
        "final_analysis",
        "executive_summary",
        "other_type",
    )
]
_PROBE_TOOLS = [
    {
        "name": "probe.tool",
        "description": "d",
        "input_schema": {
            "properties": {
                "p": {"type": "string", "description": "d", "default": 1, "enum": ["a"]}
            },
            "required": ["p"],
        },
    },
    {"name": "probe.bare"},
]
_PROBE_HISTORY = [
    {
        "user_question": "q",
        "messages": [{"role": r, "content": "m"} for r in ("assistant", "user", "tool", "system")],
    }
]
_PROBE_JOBS: list[dict[str, object]] = [
    {
        "kind": "react",
        "session": {"alert_type": "t", "alert_data": "a", "runbook_content": "r"},
        "stage": {
            "mcp_servers": ["probe"],
            "custom_instructions": "i",
            "previous_stage_events": _PROBE_EVENTS,
            "previous_attempt": {
                "attempt_number": 2,
                "error_message": "e",
                "previous_output": "o",
                "previous_attempt_at": "t",
            },
        },
        "tools": _PROBE_TOOLS,
    },
    {
        "kind": "react",
        "chat": {
            "user_question": "q",
            "investigation_events": _PROBE_EVENTS,
            "history": _PROBE_HISTORY,
        },
    },
    {"kind": "native_thinking"},
    {"kind": "native_thinking", "chat": {"user_question": "q", "history": _PROBE_HISTORY}},
    {"kind": "synthesis"},
    {"kind": "forced_conclusion", "forced_conclusion": {"iteration": 1, "strategy": "react"}},
    {
        "kind": "forced_conclusion",
        "forced_conclusion": {"iteration": 1, "strategy": "native_thinking"},
    },
    {"kind": "mcp_summarization", "mcp_summarization": {"max_summary_tokens": 1}},
    {"kind": "executive_summary", "executive_summary": {}},
]


def versioned_texts() -> tuple[str, ...]:
    """The template constants plus the rendering of the probe jobs."""
    ctx = RenderContext(registry=MCPServerRegistry(MappingProxyType({"probe": "p"})))
    return (*ALL_TEMPLATES, *probe_renderings(build, _PROBE_JOBS, ctx))


FAMILY = Family(
    "tarsy",
    template_version("tarsy", versioned_texts()),
    build,
    stable_end=stable_end,
    plan_for=plan_for,
)
