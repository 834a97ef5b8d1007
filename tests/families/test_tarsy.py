"""Unit tests of the seed-000 components, following the seed's testing strategy.

Expected texts are written from the seed's Go code (the normative definition), not
taken from the implementation.
"""

from types import MappingProxyType
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from schemas.job import (
    ChatExchange,
    HistoryMessage,
    Job,
    PreviousAttempt,
    Strategy,
    TimelineEvent,
    Tool,
)
from worker.families.base import RenderContext
from worker.families.instructions import compose_instructions
from worker.families.mcp_servers import MCPServerRegistry
from worker.families.tarsy import builder
from worker.families.tarsy.chat import (
    format_chat_history,
    history_length,
)
from worker.families.tarsy.components import (
    format_alert_section,
    format_chain_context,
    format_previous_attempt,
    format_runbook_section,
)
from worker.families.tarsy.instructions import (
    compose_chat_instructions,
    compose_investigation_instructions,
)
from worker.families.tarsy.investigation_context import format_investigation_context
from worker.families.tarsy.stage_context import format_stage_context
from worker.families.tarsy.templates import (
    CHAT_GENERAL_INSTRUCTIONS,
    CHAT_RESPONSE_GUIDELINES,
    GENERAL_INSTRUCTIONS,
    REACT_FORMAT_INSTRUCTIONS,
    SEPARATOR,
)
from worker.families.tarsy.tools import extract_parameters, format_tool_descriptions

REGISTRY = MCPServerRegistry(
    MappingProxyType({"k8s": "Use kubectl.", "prom": "Use PromQL.", "quiet": ""})
)
CTX = RenderContext(registry=REGISTRY)


def job(**fields: Any) -> Job:
    return Job.model_validate({"job_id": "j", "kind": "react", **fields})


# --- components -------------------------------------------------------------------


def test_alert_section_with_type_and_data() -> None:
    assert format_alert_section("PodCrash", "a: 1") == (
        "## Alert Details\n\n### Alert Metadata\n**Alert Type:** PodCrash\n\n"
        "### Alert Data\n<!-- ALERT_DATA_START -->\na: 1\n<!-- ALERT_DATA_END -->\n"
    )


def test_alert_section_without_type_has_no_metadata() -> None:
    text = format_alert_section("", "a: 1")
    assert "Alert Metadata" not in text
    assert text.startswith("## Alert Details\n\n### Alert Data\n<!-- ALERT_DATA_START -->\n")


def test_empty_alert_data() -> None:
    assert format_alert_section("", "") == (
        "## Alert Details\n\n### Alert Data\nNo additional alert data provided.\n"
    )


def test_alert_data_is_opaque() -> None:
    data = '{"not": "parsed"} %s {alert_type} <!-- ALERT_DATA_END -->'
    assert data in format_alert_section("T", data)


def test_runbook_section() -> None:
    assert format_runbook_section("# Steps") == (
        "## Runbook Content\n```markdown\n<!-- RUNBOOK START -->\n# Steps\n<!-- RUNBOOK END -->\n```\n"
    )
    assert format_runbook_section("") == "## Runbook Content\nNo runbook available.\n"


def test_chain_context() -> None:
    assert format_chain_context("ctx") == "## Previous Stage Data\nctx\n"
    assert format_chain_context("") == (
        "## Previous Stage Data\nNo previous stage data is available for this alert. "
        "This is the first stage of analysis.\n"
    )


# --- instructions -----------------------------------------------------------------


def test_three_tiers_in_order_with_unknown_and_empty_servers_skipped() -> None:
    composed = compose_investigation_instructions(
        REGISTRY, ["prom", "missing", "quiet", "k8s"], "Be brief."
    )
    assert composed == "\n\n".join(
        [
            GENERAL_INSTRUCTIONS,
            "## prom Instructions\n\nUse PromQL.",
            "## k8s Instructions\n\nUse kubectl.",
            "## Agent-Specific Instructions\n\nBe brief.",
        ]
    )


def test_tier_one_alone() -> None:
    assert compose_instructions("T1", REGISTRY, [], "") == "T1"


def test_chat_instructions_use_chat_tier_one_and_guidelines() -> None:
    composed = compose_chat_instructions(REGISTRY, ["k8s"], "")
    assert composed.startswith(CHAT_GENERAL_INSTRUCTIONS + "\n\n## k8s Instructions")
    assert composed.endswith("Use kubectl.\n\n" + CHAT_RESPONSE_GUIDELINES)
    assert GENERAL_INSTRUCTIONS not in composed


# --- tools ------------------------------------------------------------------------


def test_parameters_sorted_with_required_type_description_and_hints() -> None:
    schema = {
        "type": "object",
        "properties": {
            "zone": {"type": "string", "description": "Zone", "enum": ["a", "b"]},
            "count": {"type": "integer", "default": 3},
            "name": {"description": ""},
            "broken": "not-an-object",
        },
        "required": ["zone", 5],
    }
    assert extract_parameters(schema) == [
        "count (optional, integer) [default: 3]",
        "name (optional)",
        'zone (required, string): Zone [choices: ["a", "b"]]',
    ]


def test_d1_default_and_choices_rendering() -> None:
    schema = {
        "properties": {
            "a": {"default": "as is"},
            "b": {"default": None},
            "c": {"default": {"z": 1, "a": [True, "é"]}},
            "d": {"enum": ["fast", "slow", 3, None]},
            "e": {"default": False, "enum": []},
        }
    }
    assert extract_parameters(schema) == [
        "a (optional) [default: as is]",
        "b (optional) [default: null]",
        'c (optional) [default: {"a":[true,"é"],"z":1}]',
        'd (optional) [choices: ["fast", "slow", 3, null]]',
        "e (optional) [default: false; choices: []]",
    ]


def test_schemas_without_properties_have_no_parameters() -> None:
    assert extract_parameters(None) == []
    assert extract_parameters({}) == []
    assert extract_parameters({"properties": ["x"]}) == []


def test_tool_descriptions_numbered_with_blank_line_between() -> None:
    tools = [
        Tool(
            name="a.get",
            description="Get",
            input_schema={"properties": {"id": {"type": "string"}}, "required": ["id"]},
        ),
        Tool(name="b.list"),
    ]
    assert format_tool_descriptions(tools) == (
        "1. **a.get**: Get\n    **Parameters**:\n    - id (required, string)\n"
        "\n"
        "2. **b.list**: \n    **Parameters**: None\n"
    )
    assert format_tool_descriptions([]) == "No tools available."


def test_memoised_tool_blocks_follow_schema_changes() -> None:
    before = Tool(name="t", description="d", input_schema={"properties": {"x": {"type": "string"}}})
    after = Tool(name="t", description="d", input_schema={"properties": {"x": {"type": "integer"}}})
    assert "x (optional, string)" in format_tool_descriptions([before])
    assert "x (optional, integer)" in format_tool_descriptions([after])
    assert format_tool_descriptions([before, before]).startswith("1. **t**")


# --- chat -------------------------------------------------------------------------


def test_chat_history_with_d2_tool_messages_and_dropped_system() -> None:
    exchanges = [
        ChatExchange(
            user_question="why?",
            messages=[
                HistoryMessage(role="assistant", content="because"),
                HistoryMessage(role="user", content="obs"),
                HistoryMessage(role="tool", content="out"),
                HistoryMessage(role="system", content="hidden"),
            ],
        ),
        ChatExchange(user_question="and?"),
    ]
    assert format_chat_history(exchanges) == (
        f"\n{SEPARATOR}\n💬 CHAT HISTORY (2 previous exchanges)\n{SEPARATOR}\n\n"
        "## Exchange 1\n\n**USER:**\nwhy?\n\n"
        "**ASSISTANT:**\nbecause\n\n"
        "**Observation:**\n\nobs\n\n"
        "**Observation (tool):**\n\nout\n\n"
        "## Exchange 2\n\n**USER:**\nand?\n\n"
    )


def test_chat_history_singular_and_empty() -> None:
    assert "(1 previous exchange)\n" in format_chat_history([ChatExchange(user_question="q")])
    assert format_chat_history([]) == ""


def test_the_history_length_is_the_length_of_the_formatted_history() -> None:
    exchanges = [
        ChatExchange(
            user_question="why?", messages=[HistoryMessage(role="assistant", content="because")]
        )
    ]
    written = (
        f"\n{SEPARATOR}\n💬 CHAT HISTORY (1 previous exchange)\n{SEPARATOR}\n\n"
        "## Exchange 1\n\n**USER:**\nwhy?\n\n**ASSISTANT:**\nbecause\n\n"
    )
    assert format_chat_history(exchanges) == written
    assert history_length(exchanges) == len(written)
    assert history_length([]) == 0


@given(
    st.lists(
        st.builds(
            ChatExchange,
            user_question=st.text(max_size=30),
            messages=st.lists(
                st.builds(
                    HistoryMessage,
                    role=st.sampled_from(["assistant", "user", "tool", "system"]),
                    content=st.text(max_size=30),
                ),
                max_size=4,
            ),
        ),
        max_size=12,
    )
)
def test_the_history_length_is_measured_as_it_is_formatted(exchanges: list[ChatExchange]) -> None:
    assert history_length(exchanges) == len(format_chat_history(exchanges))


def test_chat_user_message_order_tools_context_history_task() -> None:
    chat = {
        "user_question": "What now?",
        "investigation_context": "CONTEXT",
        "history": [{"user_question": "before", "messages": []}],
    }
    messages = builder.build_react_messages(job(chat=chat, tools=[{"name": "t"}]), CTX)
    user = messages[1]["content"]
    order = [
        user.index(s)
        for s in (
            "Available tools:",
            "CONTEXT",
            "CHAT HISTORY",
            "🎯 CURRENT TASK",
            "**Question:** What now?",
        )
    ]
    assert order == sorted(order)
    assert user.endswith("Begin your response:\n")


def test_native_thinking_chat_has_no_tools_in_text() -> None:
    chat = {"user_question": "q"}
    messages = builder.build_native_thinking_messages(
        job(kind="native_thinking", chat=chat, tools=[{"name": "t"}]), CTX
    )
    assert "Available tools" not in messages[1]["content"]
    assert messages[0]["content"].startswith(CHAT_GENERAL_INSTRUCTIONS)


# --- context formatters ---------------------------------------------------------------


def test_investigation_context_labels_every_event_type() -> None:
    events = [
        TimelineEvent(event_type=t, content=t.upper())
        for t in (
            "llm_thinking",
            "llm_response",
            "tool_call",
            "tool_result",
            "final_analysis",
            "user_note",
        )
    ]
    assert format_investigation_context(events) == (
        f"{SEPARATOR}\n📋 INVESTIGATION HISTORY\n{SEPARATOR}\n\n# Original Investigation\n\n"
        "**Internal Reasoning:**\n\nLLM_THINKING\n\n"
        "**Agent Response:**\n\nLLM_RESPONSE\n\n"
        "**Tool Call:** TOOL_CALL\n\n"
        "**Observation:**\n\nTOOL_RESULT\n\n"
        "**Final Analysis:**\n\nFINAL_ANALYSIS\n\n"
        "**user note:**\n\nUSER_NOTE\n\n"
    )


def test_investigation_context_of_no_events_is_the_header_only() -> None:
    assert format_investigation_context([]).endswith("# Original Investigation\n\n")


def test_stage_context_formatter_spec_section_6() -> None:
    events = [
        TimelineEvent(event_type=t, content="c")
        for t in (
            "llm_thinking",
            "llm_response",
            "tool_call",
            "tool_result",
            "final_analysis",
            "executive_summary",
            "custom_kind",
        )
    ]
    labels = [
        "LLM Thinking",
        "LLM Response",
        "Tool Call",
        "Tool Result",
        "Analysis",
        "Executive Summary",
        "custom kind",
    ]
    assert format_stage_context(events) == (
        "<!-- STAGE_CONTEXT_START -->\n"
        + "".join(f"### {label}\n\nc\n\n" for label in labels)
        + "<!-- STAGE_CONTEXT_END -->"
    )
    assert format_stage_context([]) == ""


# --- builder ----------------------------------------------------------------------


def test_react_system_has_format_instructions_native_thinking_does_not() -> None:
    react = builder.build_react_messages(job(stage={"mcp_servers": ["k8s"]}), CTX)
    native = builder.build_native_thinking_messages(
        job(kind="native_thinking", stage={"mcp_servers": ["k8s"]}), CTX
    )
    assert [m["role"] for m in react] == ["system", "user"]
    assert REACT_FORMAT_INSTRUCTIONS in react[0]["content"]
    assert REACT_FORMAT_INSTRUCTIONS not in native[0]["content"]
    for messages in (react, native):
        assert "## k8s Instructions" in messages[0]["content"]
        assert messages[0]["content"].endswith(
            "Focus on investigation and providing recommendations for human operators to execute."
        )


def test_investigation_user_message_section_order() -> None:
    j = job(
        session={"alert_type": "T", "alert_data": "D", "runbook_content": "R"},
        stage={"previous_stage_context": "P"},
        tools=[{"name": "t"}],
    )
    user = builder.build_react_messages(j, CTX)[1]["content"]
    marks = [
        "Available tools:",
        "## Alert Details",
        "## Runbook Content",
        "## Previous Stage Data\nP\n",
        "## Your Task",
    ]
    positions = [user.index(m) for m in marks]
    assert positions == sorted(positions)


def test_previous_stage_events_go_through_the_stage_formatter() -> None:
    j = job(
        stage={"previous_stage_events": [{"event_type": "final_analysis", "content": "found it"}]}
    )
    user = builder.build_react_messages(j, CTX)[1]["content"]
    assert (
        "## Previous Stage Data\n<!-- STAGE_CONTEXT_START -->\n### Analysis\n\nfound it\n\n<!-- STAGE_CONTEXT_END -->\n"
        in user
    )


def test_synthesis_ignores_alert_type_and_tools() -> None:
    j = job(
        kind="synthesis",
        session={"alert_type": "SECRET_TYPE", "alert_data": "D"},
        tools=[{"name": "t"}],
    )
    system, user = (m["content"] for m in builder.build_synthesis_messages(j, CTX))
    assert (
        "Your task is to synthesize the investigation results from multiple agents into a single coherent analysis."
        in system
    )
    assert user.startswith(
        "Synthesize the investigation results and provide recommendations.\n\n## Alert Details"
    )
    assert "SECRET_TYPE" not in user and "Available tools" not in user


def test_forced_conclusion_is_strategy_specific() -> None:
    react = builder.build_forced_conclusion_prompt(7, Strategy.REACT)
    native = builder.build_forced_conclusion_prompt(7, Strategy.NATIVE_THINKING)
    assert react.startswith("You have reached the investigation iteration limit (7 iterations).")
    assert react.endswith("Begin your conclusion now.")
    assert native.endswith(
        "Provide a clear, structured conclusion that directly addresses the investigation question."
    )


def test_summarization_and_executive_summary_keep_percent_signs_literal() -> None:
    system = builder.build_mcp_summarization_system_prompt("srv", "tool", 250)
    assert "**srv.tool**" in system and "under 250 tokens" in system
    user = builder.build_mcp_summarization_user_prompt("ctx %s %d", "srv", "tool", "100% done")
    assert "=== CONVERSATION START ===\nctx %s %d\n=== CONVERSATION END ===" in user
    assert "executed `srv.tool`" in user and "100% done" in user
    assert "\n%d\n" in builder.build_executive_summary_user_prompt("%d")


def test_rerun_section_full_and_sparse() -> None:
    full = PreviousAttempt(
        attempt_number=2,
        error_message="timeout",
        previous_output="half",
        previous_attempt_at="2026-01-01T00:00:00Z",
    )
    assert format_previous_attempt(full) == (
        "## Previous Attempt (attempt 2)\n"
        "The previous attempt at this stage did not complete.\n"
        "**Failed at:** 2026-01-01T00:00:00Z\n"
        "**Error:** timeout\n"
        "<!-- PREVIOUS_ATTEMPT_START -->\nhalf\n<!-- PREVIOUS_ATTEMPT_END -->\n"
        "Build on what it established and do not repeat what failed.\n"
    )
    sparse = PreviousAttempt(attempt_number=3, error_message="")
    assert format_previous_attempt(sparse) == (
        "## Previous Attempt (attempt 3)\n"
        "The previous attempt at this stage did not complete.\n"
        "Build on what it established and do not repeat what failed.\n"
    )


def test_rerun_section_sits_after_chain_context_in_investigation_and_synthesis() -> None:
    attempt = {"attempt_number": 2, "error_message": "boom"}
    for kind in ("react", "native_thinking", "synthesis"):
        user = builder.build(
            job(kind=kind, stage={"previous_stage_context": "P", "previous_attempt": attempt}), CTX
        ).messages[1]["content"]
        assert "## Previous Stage Data\nP\n\n## Previous Attempt (attempt 2)\n" in user
        assert "do not repeat what failed.\n\n## Your Task" in user
