"""Seed 001 (legacy TARSy builder): each component, each kind, and payload validation.

Expected texts are written out from the seed's code, not taken from the module under
test, so a change to a template shows up here as well as in the conformance vectors.
"""

import json
from typing import Any

import pytest

from schemas.families import LegacyPayload
from worker.families.legacy.components import (
    format_alert_section,
    format_alert_value,
    format_chain_context,
    format_runbook_section,
)
from worker.families.legacy.formatting import (
    flatten_react_history,
    format_available_actions,
    format_iteration_history,
    format_react_history,
)
from worker.families.legacy.prompts import (
    build_final_analysis_prompt,
    build_iterative_mcp_tool_selection_prompt,
    build_mcp_tool_selection_prompt,
    build_stage_analysis_react_prompt,
    build_stage_info,
    build_standard_react_prompt,
    display_max_iterations,
    get_enhanced_react_system_message,
)
from worker.render.config import parse_config
from worker.render.renderer import Renderer

GENERAL_HEAD = "## General SRE Agent Instructions\n\nYou are an expert Site Reliability Engineer"
GENERAL_TAIL = "Focus on root cause analysis and sustainable solutions."


def payload(**fields: Any) -> LegacyPayload:
    fields.setdefault("alert_data", {"alert_type": "PodCrashLooping"})
    return LegacyPayload.model_validate(fields)


def render(renderer: Renderer, kind: str, **fields: Any) -> Any:
    fields.setdefault("alert_data", {"alert_type": "PodCrashLooping"})
    job = {"job_id": "j-1", "kind": kind, "legacy": fields}
    return renderer.render(json.dumps(job).encode("utf-8"))


@pytest.fixture(scope="module")
def registry_renderer() -> Renderer:
    config = parse_config(
        {
            "mcp_servers": {
                "kubernetes-server": {"instructions": "Always name the namespace."},
                "empty-server": {"instructions": ""},
            }
        }
    )
    return Renderer(config)


# ------------------------------------------------------------------ alert section


def test_alert_section_lists_each_entry_with_a_title_cased_key() -> None:
    section = format_alert_section({"alert_type": "PodCrashLooping", "pod_name": "web-1"})

    assert section == ("## Alert Details\n\n**Alert Type:** PodCrashLooping\n**Pod Name:** web-1")


def test_alert_section_without_data() -> None:
    assert format_alert_section({}) == "## Alert Details\n\nNo alert data provided."


def test_alert_keys_keep_the_order_received() -> None:
    section = format_alert_section({"zeta": 1, "alpha": 2})

    assert section.index("**Zeta:**") < section.index("**Alpha:**")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"a": 1}, '\n```json\n{\n  "a": 1\n}\n```'),
        (["x", 2], '\n```json\n[\n  "x",\n  2\n]\n```'),
        # A string holding JSON is parsed and re-indented.
        ('{"k": [1]}', '\n```json\n{\n  "k": [\n    1\n  ]\n}\n```'),
        ("[1, 2]", "\n```json\n[\n  1,\n  2\n]\n```"),
        # Looks like JSON but is not: printed as is, even across lines.
        ("{not json", "{not json"),
        ("[a\nb", "[a\nb"),
        ("line1\nline2", "\n```\nline1\nline2\n```"),
        ("plain", "plain"),
        (None, "N/A"),
        (True, "True"),
        (False, "False"),
        (3, "3"),
        (2.5, "2.5"),
        ("", ""),
    ],
)
def test_alert_values_are_formatted_by_type(value: Any, expected: str) -> None:
    assert format_alert_value(value) == expected


def test_alert_json_is_ascii_escaped_like_python_json_dumps() -> None:
    assert format_alert_value({"city": "ñandú"}) == (
        '\n```json\n{\n  "city": "\\u00f1and\\u00fa"\n}\n```'
    )
    # Plain text is not JSON-encoded, so it keeps its characters.
    assert format_alert_value("ñandú") == "ñandú"


# ------------------------------------------------------------------ runbook and chain context


def test_runbook_section_wraps_the_content_in_markers() -> None:
    assert format_runbook_section("# Steps\n1. check") == (
        "## Runbook Content\n```markdown\n<!-- RUNBOOK START -->\n"
        "# Steps\n1. check\n<!-- RUNBOOK END -->\n```"
    )


@pytest.mark.parametrize("empty", ["", None])
def test_runbook_section_without_runbook(empty: str | None) -> None:
    assert format_runbook_section(empty) == (
        "## Runbook Content\n```markdown\n<!-- RUNBOOK START -->\n"
        "No runbook available\n<!-- RUNBOOK END -->\n```"
    )


def test_runbook_braces_are_not_template_fields() -> None:
    assert "{alert} {{ x }}" in format_runbook_section("{alert} {{ x }}")


def test_chain_context_is_the_previous_stage_text_or_a_placeholder() -> None:
    assert format_chain_context("stage 1 found OOM") == "stage 1 found OOM"
    assert format_chain_context("") == "No previous stage data available."
    assert format_chain_context(None) == "No previous stage data available."


# ------------------------------------------------------------------ available actions


def test_no_tools() -> None:
    assert format_available_actions([]) == "No tools available."


def test_available_actions_name_server_tool_and_parameters() -> None:
    tools: list[dict[str, Any]] = [
        {
            "server": "kubernetes-server",
            "name": "pods_log",
            "description": "Read pod logs",
            "input_schema": {
                "type": "object",
                "properties": {"pod": {"description": "Pod name"}, "tail": {"type": "integer"}},
            },
        },
        {"server": "argocd-server", "tool": "app_get", "description": "Get an app"},
        {"name": "bare"},
        {"server": "s", "name": "n", "description": "d", "input_schema": {"properties": {}}},
    ]

    assert format_available_actions(tools) == (
        "kubernetes-server.pods_log: Read pod logs\n"
        "  Parameters: pod: Pod name, tail: no description\n"
        "argocd-server.app_get: Get an app\n"
        "unknown.bare: No description available\n"
        "s.n: d"
    )


def test_name_wins_over_tool() -> None:
    assert format_available_actions([{"server": "s", "name": "a", "tool": "b"}]) == (
        "s.a: No description available"
    )


# ------------------------------------------------------------------ react history


def test_react_history_is_flattened_one_line_per_entry() -> None:
    history = [
        "Thought: look at pods",
        ["Action: pods_log", "Action Input: web-1"],
        "Observation: ok",
    ]

    assert flatten_react_history(history) == [
        "Thought: look at pods",
        "Action: pods_log",
        "Action Input: web-1",
        "Observation: ok",
    ]
    assert format_react_history(history) == (
        "Thought: look at pods\nAction: pods_log\nAction Input: web-1\nObservation: ok\n"
    )


@pytest.mark.parametrize("empty", [None, []])
def test_no_react_history_renders_nothing(empty: list[str] | None) -> None:
    assert format_react_history(empty) == ""


# ------------------------------------------------------------------ ReAct prompts


def test_react_system_message_wraps_the_composed_instructions() -> None:
    message = get_enhanced_react_system_message("COMPOSED", "triage")

    assert message.startswith("COMPOSED\n\n🚨 WARNING: NEVER GENERATE FAKE OBSERVATIONS! 🚨\n")
    assert message.endswith("\n\nFocus on triage for human operators to execute.")
    # The seed keeps a trailing space on this line.
    assert "\n1. Continue investigating: \n" in message


def test_standard_react_prompt_layout() -> None:
    prompt = build_standard_react_prompt(
        payload(
            alert_data={"alert_type": "DiskFull"},
            runbook_content="rb",
            tools=[{"server": "s", "name": "t", "description": "d"}],
        ),
        ["Thought: first", ["Action: s.t", "Action Input: x"]],
    )

    assert prompt.startswith(
        "Answer the following question using the available tools.\n\n"
        "Available tools:\ns.t: d\n\n"
        "Question: Analyze this DiskFull alert and provide actionable recommendations.\n\n"
        "## Alert Details\n\n**Alert Type:** DiskFull\n\n## Runbook Content\n"
    )
    assert (
        "<!-- RUNBOOK END -->\n```\n\n## Previous Stage Data\n"
        "No previous stage data available.\n\n## Your Task\n" in prompt
    )
    # The seed keeps two trailing spaces on this line.
    assert "\n2. Current system state assessment  \n" in prompt
    assert prompt.endswith(
        "Be thorough in your investigation before providing the final answer.\n\n"
        "Thought: first\nAction: s.t\nAction Input: x\n\nBegin!"
    )


def test_standard_react_prompt_without_history_has_an_empty_history_line() -> None:
    prompt = build_standard_react_prompt(payload(), None)

    assert prompt.endswith("before providing the final answer.\n\n\nBegin!")


@pytest.mark.parametrize(
    ("alert_data", "alert_type"),
    [
        ({"alert_type": "A", "alert": "B"}, "A"),
        ({"alert": "B"}, "B"),
        ({"severity": "high"}, "Unknown Alert"),
        ({"alert_type": None}, "None"),
    ],
)
def test_alert_type_comes_from_alert_type_then_alert(
    alert_data: dict[str, Any], alert_type: str
) -> None:
    prompt = build_standard_react_prompt(payload(alert_data=alert_data), None)

    assert f"Question: Analyze this {alert_type} alert and provide" in prompt


def test_stage_analysis_prompt_names_the_stage_in_capitals() -> None:
    prompt = build_stage_analysis_react_prompt(
        payload(stage_name="data-collection", previous_stage_context="earlier findings"), None
    )

    assert (
        "Question: Investigate this PodCrashLooping alert and provide stage-specific analysis."
        in prompt
    )
    assert (
        "## Previous Stage Data\nearlier findings\n\n## Your Task: DATA-COLLECTION STAGE\n"
        in prompt
    )
    assert prompt.endswith(
        "Your Final Answer should include both the data collected and your stage-specific "
        "analysis.\n\n\nBegin!"
    )


@pytest.mark.parametrize("stage_name", ["", None])
def test_stage_analysis_defaults_to_the_analysis_stage(stage_name: str | None) -> None:
    prompt = build_stage_analysis_react_prompt(payload(stage_name=stage_name), None)

    assert "## Your Task: ANALYSIS STAGE\n" in prompt


# ------------------------------------------------------------------ final analysis


def test_stage_info_variants() -> None:
    assert build_stage_info(payload()) == ""
    assert build_stage_info(payload(stage_name="s1")) == "\n**Stage:** s1\n"
    assert build_stage_info(payload(stage_name="s3", is_final_stage=True)) == (
        "\n**Stage:** s3 (Final Analysis Stage)\n"
    )
    assert (
        build_stage_info(
            payload(stage_name="s3", is_final_stage=True, previous_stages=["s1", "s2"])
        )
        == "\n**Stage:** s3 (Final Analysis Stage)\n**Previous Stages:** s1, s2\n"
    )
    # Previous stages alone say nothing without a stage name, as in the seed.
    assert build_stage_info(payload(previous_stages=["s1"])) == ""


def test_final_analysis_prompt_layout() -> None:
    prompt = build_final_analysis_prompt(
        payload(
            stage_name="final",
            is_final_stage=True,
            agent_name="KubernetesAgent",
            mcp_servers=["kubernetes-server", "argocd-server"],
        )
    )

    assert prompt.startswith(
        "# Final Analysis Task\n\n\n**Stage:** final (Final Analysis Stage)\n\n\n"
        "# SRE Alert Analysis Request\n\n"
        "You are an expert Site Reliability Engineer (SRE) analyzing a system alert using the "
        "KubernetesAgent.\nThis agent specializes in kubernetes-server, argocd-server operations"
    )
    assert (
        "potential next steps.\n\n## Alert Details\n\n"
        "**Alert Type:** PodCrashLooping\n\n## Runbook Content\n" in prompt
    )
    assert "\n2. Impact assessment  \n" in prompt
    assert prompt.endswith("Do NOT call any tools - use only the provided data.")


def test_final_analysis_without_stage_leaves_its_lines_empty() -> None:
    prompt = build_final_analysis_prompt(payload())

    assert prompt.startswith("# Final Analysis Task\n\n\n\n# SRE Alert Analysis Request\n")
    assert "using the .\nThis agent specializes in  operations" in prompt


# ------------------------------------------------------------------ tool selection


def test_tool_selection_dumps_the_tools_as_received() -> None:
    tools = [
        {
            "description": "Lecture des journaux ñ",
            "name": "pods_log",
            "server": "kubernetes-server",
            "input_schema": {"properties": {"pod": {"description": "Pod"}}, "type": "object"},
            "x-extra": [1, None],
        }
    ]

    prompt = build_mcp_tool_selection_prompt(payload(tools=tools, server_guidance="GUIDE"))

    expected_tools = (
        "## Available MCP Tools\n"
        "{\n"
        '  "tools": [\n'
        "    {\n"
        '      "description": "Lecture des journaux \\u00f1",\n'
        '      "name": "pods_log",\n'
        '      "server": "kubernetes-server",\n'
        '      "input_schema": {\n'
        '        "properties": {\n'
        '          "pod": {\n'
        '            "description": "Pod"\n'
        "          }\n"
        "        },\n"
        '        "type": "object"\n'
        "      },\n"
        '      "x-extra": [\n'
        "        1,\n"
        "        null\n"
        "      ]\n"
        "    }\n"
        "  ]\n"
        "}\n\n## Instructions\n"
    )
    assert expected_tools in prompt
    assert prompt.startswith(
        "# MCP Tool Selection Request\n\nBased on the following alert and runbook, determine "
        "which MCP tools should be called to gather additional information.\n\nGUIDE\n\n"
        "## Alert Information\n## Alert Details\n\n"
    )
    # The seed's {{ }} escapes print single braces.
    assert '  {\n    "server": "kubernetes",\n    "tool": "get_namespace_status",\n' in prompt
    assert prompt.endswith(
        "Focus on gathering the most relevant information to diagnose the issue described "
        "in the alert."
    )


def test_tool_selection_with_no_tools() -> None:
    prompt = build_mcp_tool_selection_prompt(payload())

    assert '## Available MCP Tools\n{\n  "tools": []\n}\n\n' in prompt


# ------------------------------------------------------------------ iterative tool selection


@pytest.mark.parametrize(
    ("current", "maximum", "shown"),
    [(1, None, 5), (5, None, 5), (6, None, 6), (2, 10, 10), (7, 6, 7), (6, 6, 6)],
)
def test_displayed_iteration_cap(current: int, maximum: int | None, shown: int) -> None:
    assert display_max_iterations(current, maximum) == shown


def test_iterative_prompt_names_the_iteration_and_the_cap() -> None:
    prompt = build_iterative_mcp_tool_selection_prompt(
        payload(current_iteration=3, server_guidance="GUIDE")
    )

    assert prompt.startswith("# Iterative MCP Tool Selection Request (Iteration 3)\n\n")
    assert "complete the analysis.\n\nGUIDE\n\n## Alert Information\n## Alert Details" in prompt
    assert "## Previous Iterations History\nNo previous iterations.\n\n## Instructions\n" in prompt
    assert "You are currently on iteration 3 of 5 maximum iterations." in prompt
    assert '{\n  "continue": false,  \n  "reasoning": ' in prompt
    assert prompt.endswith("it needs to be actionable based on the runbook steps.")


def test_iteration_history_tools_results_and_partial_analysis() -> None:
    history: list[dict[str, Any]] = [
        {
            "tools_called": [
                {"server": "k8s", "tool": "pods_list", "reason": "see pods"},
                {"tool": "events"},
            ],
            "mcp_data": {
                "k8s": [
                    {"tool": "resources_list", "parameters": {"kind": "Pod"}, "result": {"n": 2}},
                    {"tool": "resources_get", "parameters": {"name": "x"}, "result": "ok"},
                    {"tool": "pods_log", "parameters": {}, "error": "timeout"},
                    {"tool": "pods_top", "result": ""},
                    {"parameters": {}, "result": 0},
                ],
                "argocd": {"apps": ["a", "b"], "note": "synced"},
                "prom": "up=1",
            },
            "partial_analysis": "pods restart on OOM",
        },
        {"tools_called": [], "partial_analysis": None},
    ]

    assert format_iteration_history(history) == (
        "### Iteration 1\n"
        "**Tools Called:**\n"
        "- k8s.pods_list: see pods\n"
        "- unknown.events: No reason provided\n"
        "\n"
        "**Results:**\n"
        "- **k8s**: 5 data points collected\n"
        "  - **resources_list_Pod_result**:\n"
        '```\n{\n  "result": {\n    "n": 2\n  }\n}\n```\n'
        "  - **resources_get_result**:\n"
        '```\n{\n  "result": "ok"\n}\n```\n'
        "  - **pods_log_result_error**: timeout\n"
        "- **argocd**: 1 data points collected\n"
        '  - **apps**:\n```\n[\n  "a",\n  "b"\n]\n```\n'
        "  - **note**:\n```\nsynced\n```\n"
        "- **prom**: 1 data points collected\n"
        "```\nup=1\n```\n"
        "\n"
        "**Partial Analysis:**\npods restart on OOM\n\n"
        "---\n\n"
        "### Iteration 2\n"
        "**Partial Analysis:**\nNone\n\n"
        "---"
    )


def test_no_iteration_history() -> None:
    assert format_iteration_history([]) == "No previous iterations."


def _result_block(history_text: str) -> str:
    return history_text.split("```\n")[1]


def test_results_longer_than_3000_characters_are_truncated() -> None:
    # json.dumps({"result": s}, indent=2) is s plus 15 characters before and 3 after.
    at_limit = format_iteration_history(_one_result("x" * 2982))
    one_over = format_iteration_history(_one_result("x" * 2983))
    long = format_iteration_history(_one_result("x" * 4000))

    assert _result_block(at_limit) == '{\n  "result": "' + "x" * 2982 + '"\n}\n'
    assert _result_block(one_over) == (
        '{\n  "result": "' + "x" * 2983 + '"\n' + "\n... [truncated for brevity]\n"
    )
    assert _result_block(long) == (
        '{\n  "result": "' + "x" * 2985 + "\n... [truncated for brevity]\n"
    )


def _one_result(result: str) -> list[dict[str, Any]]:
    return [{"mcp_data": {"k8s": [{"tool": "t", "result": result}]}}]


def test_dict_and_scalar_server_data_are_truncated_too() -> None:
    history = [{"mcp_data": {"a": {"k": "y" * 4000}, "b": "z" * 4000}}]

    text = format_iteration_history(history)

    assert text.count("\n... [truncated for brevity]\n```") == 2
    assert "y" * 3000 + "\n... [truncated" in text
    assert "z" * 3001 not in text


# ------------------------------------------------------------------ kinds, end to end


def test_legacy_react_messages(registry_renderer: Renderer) -> None:
    outcome = render(
        registry_renderer,
        "legacy_react",
        mcp_servers=["kubernetes-server", "unknown-server", "empty-server"],
        custom_instructions="Be brief.",
        task_focus="triage",
    )

    assert outcome.status == "ok", outcome.body
    system, user = outcome.messages
    assert system["role"] == "system"
    assert system["content"].startswith(GENERAL_HEAD)
    # Seed 000's three tiers: unknown and empty servers are skipped.
    assert (
        f"{GENERAL_TAIL}\n\n## kubernetes-server Instructions\n\nAlways name the namespace.\n\n"
        "## Agent-Specific Instructions\n\nBe brief.\n\n🚨 WARNING"
    ) in system["content"]
    assert system["content"].endswith("Focus on triage for human operators to execute.")
    assert user["role"] == "user"
    assert user["content"].startswith("Answer the following question using the available tools.")
    # The unknown server is named in the reply; the registered one, empty or not, is not.
    assert json.loads(outcome.body)["meta"]["warnings"] == [
        "MCP server 'unknown-server' is not in the MCP server registry; "
        "its instructions are left out"
    ]
    assert "Question: Analyze this PodCrashLooping alert" in user["content"]


def test_legacy_stage_react_messages(renderer: Renderer) -> None:
    outcome = render(renderer, "legacy_stage_react", stage_name="collect")

    assert outcome.status == "ok", outcome.body
    system, user = outcome.messages
    assert system["content"].endswith(
        "Focus on investigation and providing recommendations for human operators to execute."
    )
    assert "## Your Task: COLLECT STAGE" in user["content"]


def test_legacy_final_analysis_system_is_the_composed_instructions(renderer: Renderer) -> None:
    outcome = render(renderer, "legacy_final_analysis", custom_instructions="Custom.")

    assert outcome.status == "ok", outcome.body
    system, user = outcome.messages
    assert system["content"].startswith(GENERAL_HEAD)
    assert system["content"].endswith(
        f"{GENERAL_TAIL}\n\n## Agent-Specific Instructions\n\nCustom."
    )
    assert user["content"].startswith("# Final Analysis Task\n")


def test_legacy_tool_selection_messages(renderer: Renderer) -> None:
    outcome = render(renderer, "legacy_tool_selection")

    assert outcome.status == "ok", outcome.body
    system, user = outcome.messages
    assert system["content"].startswith("You are an expert SRE analyzing alerts. Based on")
    assert system["content"].endswith("Return only a valid JSON array with no additional text.")
    assert user["content"].startswith("# MCP Tool Selection Request\n")


def test_legacy_iterative_tool_selection_messages(renderer: Renderer) -> None:
    outcome = render(
        renderer, "legacy_iterative_tool_selection", current_iteration=2, max_iterations=4
    )

    assert outcome.status == "ok", outcome.body
    system, user = outcome.messages
    assert system["content"].endswith("Return only a valid JSON object with no additional text.")
    assert "iteration 2 of 4 maximum iterations" in user["content"]


def test_template_version_is_reported(renderer: Renderer) -> None:
    outcome = render(renderer, "legacy_react")

    meta = json.loads(outcome.body)["meta"]
    assert meta["family"] == "legacy"
    assert meta["template_version"].startswith("legacy-")


# ------------------------------------------------------------------ validation


def _error_fields(outcome: Any) -> list[str]:
    assert outcome.status == "error"
    assert outcome.error_code == "invalid_job"
    return [detail["field"] for detail in json.loads(outcome.body)["error"]["details"]]


def test_a_property_schema_that_is_not_an_object_is_invalid(renderer: Renderer) -> None:
    tools = [{"name": "t", "input_schema": {"properties": {"ok": {}, "pod": "string"}}}]

    outcome = render(renderer, "legacy_react", tools=tools)

    assert _error_fields(outcome) == ["legacy.tools.0.input_schema.properties.pod"]


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        ({"tools": [{"name": "t", "input_schema": None}]}, "legacy.tools.0.input_schema"),
        (
            {"tools": [{"name": "t", "input_schema": {"properties": []}}]},
            "legacy.tools.0.input_schema.properties",
        ),
        ({"tools": [{"server": "s", "description": "no name"}]}, "legacy.tools.0"),
        ({"tools": [{"name": 7}]}, "legacy.tools.0.name"),
        ({"alert_data": "text"}, "legacy.alert_data"),
        ({"react_history": ["ok", 3]}, "legacy.react_history.1.line"),
        ({"react_history": [["ok", 3]]}, "legacy.react_history.0.lines.1"),
        ({"previous_stages": ["s1", None]}, "legacy.previous_stages.1"),
        ({"current_iteration": 0}, "legacy.current_iteration"),
        ({"iteration_history": ["not a dict"]}, "legacy.iteration_history.0"),
        (
            {"iteration_history": [{"tools_called": ["x"]}]},
            "legacy.iteration_history.0.tools_called.0",
        ),
        (
            {"iteration_history": [{"mcp_data": {"k8s": [{"tool": "t", "parameters": "kind"}]}}]},
            "legacy.iteration_history.0.mcp_data.k8s.calls.0.parameters",
        ),
    ],
)
def test_invalid_payload_fields_are_named(
    renderer: Renderer, fields: dict[str, Any], path: str
) -> None:
    outcome = render(renderer, "legacy_iterative_tool_selection", **fields)

    assert path in _error_fields(outcome)


def test_alert_data_is_required(renderer: Renderer) -> None:
    job = {"job_id": "j", "kind": "legacy_react", "legacy": {"runbook_content": "rb"}}

    outcome = renderer.render(json.dumps(job).encode("utf-8"))

    assert _error_fields(outcome) == ["legacy.alert_data"]


def test_the_legacy_payload_is_required(renderer: Renderer) -> None:
    outcome = renderer.render(b'{"job_id": "j", "kind": "legacy_final_analysis"}')

    assert _error_fields(outcome) == ["legacy"]


def test_the_legacy_payload_belongs_to_legacy_kinds(renderer: Renderer) -> None:
    job = {
        "job_id": "j",
        "kind": "skill_error_observation",
        "skill_error_observation": {"tool_name": "t"},
        "legacy": {"alert_data": {}},
    }

    outcome = renderer.render(json.dumps(job).encode("utf-8"))

    assert _error_fields(outcome) == ["legacy"]


def test_unknown_fields_are_ignored_but_tool_fields_are_kept(renderer: Renderer) -> None:
    outcome = render(
        renderer,
        "legacy_tool_selection",
        future_field=1,
        tools=[{"name": "t", "annotations": {"readOnly": True}}],
    )

    assert outcome.status == "ok", outcome.body
    assert '"annotations": {\n        "readOnly": true\n      }' in outcome.messages[1]["content"]


# ------------------------------------------------------------------ template version


def test_every_template_constant_is_versioned() -> None:
    from worker.families.legacy import templates

    constants = [
        value
        for name, value in vars(templates).items()
        if name.isupper() and isinstance(value, str)
    ]
    assert set(constants) <= set(templates.ALL_TEMPLATES)


def test_inline_text_moves_the_version(monkeypatch: pytest.MonkeyPatch) -> None:
    from worker.families.base import template_version
    from worker.families.legacy import builder, prompts

    before = template_version("legacy", builder.versioned_texts())
    original = prompts.build_stage_info
    monkeypatch.setattr(
        prompts, "build_stage_info", lambda ctx: original(ctx).replace("**Stage:**", "Stage:")
    )

    assert template_version("legacy", builder.versioned_texts()) != before


def test_probe_jobs_reach_every_legacy_kind() -> None:
    from schemas.job import LEGACY_KINDS, Kind
    from worker.families.legacy.probes import PROBE_JOBS

    assert {Kind(probe["kind"]) for probe in PROBE_JOBS} == LEGACY_KINDS
