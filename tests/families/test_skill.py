"""Seed 002 (JSON-ReAct skill prompts): each piece of the prompt, both kinds, validation."""

import json
from typing import Any

import pytest

from schemas.families import AvailableFile, Skill, SkillTool
from worker.families.skill import (
    build_available_files_section,
    build_error_observation,
    build_system_prompt,
    format_tool_descriptions,
)
from worker.render.renderer import Renderer


def tool(name: str, description: str = "", parameters: Any = None) -> SkillTool:
    return SkillTool(name=name, description=description, parameters=parameters)


def render(renderer: Renderer, kind: str, payload: dict[str, Any]) -> Any:
    job = {"job_id": "s-1", "kind": kind, kind: payload}
    return renderer.render(json.dumps(job).encode("utf-8"))


# ------------------------------------------------------------------ system prompt


def test_system_prompt_layout() -> None:
    prompt = build_system_prompt(
        Skill(name="log-triage", content="Read the logs.\nSummarise."),
        "- read: Read a file",
        "FILES",
        3,
        15,
    )

    assert prompt.startswith(
        "\nYou are executing the 'log-triage' skill autonomously.\n\n"
        "SKILL INSTRUCTIONS:\nRead the logs.\nSummarise.\n\n"
        "FILES\n\n"
        "AVAILABLE TOOLS:\n- read: Read a file\n\n"
        "EXECUTION FORMAT:\nYou must respond in JSON format with one of these structures:\n"
    )
    # The {{ }} escapes of the seed print single braces.
    assert (
        '{\n    "thought": "Your reasoning about what to do next",\n'
        '    "action": "tool_name",\n'
        '    "action_input": {"arg1": "value1", "arg2": "value2"},\n'
        '    "is_final": false\n}'
    ) in prompt
    assert prompt.endswith(
        "- Always respond with valid JSON in the format above\n\nCurrent iteration: 3/15\n"
    )


def test_skill_text_with_braces_is_not_a_template() -> None:
    prompt = build_system_prompt(Skill(name="{x}", content="use {{ and }}"), "", "", 1, 2)

    assert "executing the '{x}' skill" in prompt
    assert "SKILL INSTRUCTIONS:\nuse {{ and }}\n" in prompt


def test_without_files_the_section_leaves_blank_lines() -> None:
    prompt = build_system_prompt(Skill(name="n", content="c"), "- t: d", "", 1, 15)

    assert "SKILL INSTRUCTIONS:\nc\n\n\n\nAVAILABLE TOOLS:\n- t: d\n" in prompt


# ------------------------------------------------------------------ tool descriptions


def test_tool_descriptions_print_parameters_with_python_str() -> None:
    tools = [
        tool("read", "Read a file", {"path": {"type": "string"}, "strict": True, "max": None}),
        tool("bash", "Run a command"),
        tool("echo", "", "free text"),
        tool("noop", "Nothing", {}),
    ]

    assert format_tool_descriptions(tools) == (
        "- read: Read a file\n"
        "  Parameters: {'path': {'type': 'string'}, 'strict': True, 'max': None}\n"
        "- bash: Run a command\n"
        "- echo: \n"
        "  Parameters: free text\n"
        "- noop: Nothing"
    )


def test_allowed_tools_filter_keeps_the_tool_order() -> None:
    tools = [tool("read", "r"), tool("write", "w"), tool("bash", "b")]

    assert format_tool_descriptions(tools, ["bash", "read", "missing"]) == "- read: r\n- bash: b"


@pytest.mark.parametrize("no_filter", [None, []])
def test_no_or_empty_allowed_tools_lists_every_tool(no_filter: list[str] | None) -> None:
    tools = [tool("read", "r"), tool("write", "w")]

    assert format_tool_descriptions(tools, no_filter) == "- read: r\n- write: w"


def test_no_tools() -> None:
    assert format_tool_descriptions([]) == ""


# ------------------------------------------------------------------ available files


def test_available_files_section() -> None:
    files = {
        "reference.md": AvailableFile(description="API docs", estimated_lines=1234567),
        "B-notes.md": AvailableFile(description=None, estimated_lines=12),
        "examples.md": AvailableFile(description="", estimated_lines=None),
        "zero.md": AvailableFile(description="empty", estimated_lines=0),
    }

    assert build_available_files_section(files, "/skills/api") == (
        "AVAILABLE SUPPORTING FILES (load on-demand with 'read' tool):\n"
        "- B-notes.md (12 lines)\n"
        "- examples.md\n"
        "- reference.md: API docs (1,234,567 lines)\n"
        "- zero.md: empty\n"
        "\n"
        "Skill directory: /skills/api\n"
        "Use the 'read' tool to load these files when you need their content."
    )


def test_no_available_files() -> None:
    assert build_available_files_section({}, "/skills/api") == ""


# ------------------------------------------------------------------ error observation


def test_error_observation() -> None:
    assert build_error_observation("read", "file not found: {x}", 2) == (
        "Tool 'read' failed: file not found: {x}\n"
        "Attempt 2. Please try again with different parameters or use an alternative approach."
    )


# ------------------------------------------------------------------ kinds, end to end


def test_skill_react_is_one_system_message(renderer: Renderer) -> None:
    outcome = render(
        renderer,
        "skill_react",
        {
            "skill": {"name": "triage", "content": "Look."},
            "tools": [
                {"name": "read", "description": "Read", "parameters": {"p": 1}},
                {"name": "bash", "description": "Shell"},
            ],
            "allowed_tools": ["read"],
            "available_files": {"ref.md": {"description": "Ref", "estimated_lines": 2000}},
            "skill_dir": "/skills/triage",
            "iteration": 4,
            "max_iterations": 10,
        },
    )

    assert outcome.status == "ok", outcome.body
    (message,) = outcome.messages
    assert message["role"] == "system"
    content = message["content"]
    assert "AVAILABLE TOOLS:\n- read: Read\n  Parameters: {'p': 1}\n\n" in content
    assert "- bash" not in content
    assert "- ref.md: Ref (2,000 lines)\n\nSkill directory: /skills/triage\n" in content
    assert content.endswith("Current iteration: 4/10\n")
    assert json.loads(outcome.body)["meta"]["template_version"].startswith("skill-")


def test_skill_react_defaults_to_iteration_1_of_15(renderer: Renderer) -> None:
    outcome = render(renderer, "skill_react", {"skill": {"name": "n"}})

    assert outcome.status == "ok", outcome.body
    assert outcome.messages[0]["content"].endswith("Current iteration: 1/15\n")


def test_skill_error_observation_is_one_user_message(renderer: Renderer) -> None:
    outcome = render(
        renderer,
        "skill_error_observation",
        {"tool_name": "bash", "error": "exit 1", "retry_count": 3},
    )

    assert outcome.status == "ok", outcome.body
    assert outcome.messages == [
        {
            "role": "user",
            "content": "Tool 'bash' failed: exit 1\nAttempt 3. Please try again with different "
            "parameters or use an alternative approach.",
        }
    ]


# ------------------------------------------------------------------ validation


def _error_fields(outcome: Any) -> list[str]:
    assert outcome.status == "error"
    assert outcome.error_code == "invalid_job"
    return [detail["field"] for detail in json.loads(outcome.body)["error"]["details"]]


@pytest.mark.parametrize(
    ("payload", "path"),
    [
        ({}, "skill_react.skill"),
        ({"skill": {"content": "c"}}, "skill_react.skill.name"),
        ({"skill": {"name": "n"}, "allowed_tools": "read"}, "skill_react.allowed_tools"),
        ({"skill": {"name": "n"}, "tools": [{"description": "d"}]}, "skill_react.tools.0.name"),
        (
            {"skill": {"name": "n"}, "available_files": {"a.md": {"estimated_lines": -1}}},
            "skill_react.available_files.a.md.estimated_lines",
        ),
        (
            {"skill": {"name": "n"}, "available_files": {"a.md": {"estimated_lines": "12"}}},
            "skill_react.available_files.a.md.estimated_lines",
        ),
        ({"skill": {"name": "n"}, "iteration": 0}, "skill_react.iteration"),
    ],
)
def test_invalid_skill_react_fields_are_named(
    renderer: Renderer, payload: dict[str, Any], path: str
) -> None:
    assert _error_fields(render(renderer, "skill_react", payload)) == [path]


def test_invalid_error_observation_fields_are_named(renderer: Renderer) -> None:
    outcome = render(renderer, "skill_error_observation", {"error": 5, "retry_count": 0})

    assert _error_fields(outcome) == [
        "skill_error_observation.error",
        "skill_error_observation.retry_count",
    ]


@pytest.mark.parametrize("kind", ["skill_react", "skill_error_observation"])
def test_the_payload_is_required(renderer: Renderer, kind: str) -> None:
    outcome = renderer.render(json.dumps({"job_id": "s", "kind": kind}).encode("utf-8"))

    assert _error_fields(outcome) == [kind]


# ------------------------------------------------------------------ template version


def test_inline_text_moves_the_version(monkeypatch: pytest.MonkeyPatch) -> None:
    from worker.families import skill
    from worker.families.base import template_version

    before = template_version("skill", skill.versioned_texts())
    original = skill.build_available_files_section
    monkeypatch.setattr(
        skill,
        "build_available_files_section",
        lambda files, skill_dir: original(files, skill_dir).replace("Skill directory", "Dir"),
    )

    assert template_version("skill", skill.versioned_texts()) != before


def test_skill_and_legacy_versions_are_their_own() -> None:
    from worker.families import legacy, skill

    assert skill.FAMILY.template_version.startswith("skill-")
    assert legacy.FAMILY.template_version.startswith("legacy-")
