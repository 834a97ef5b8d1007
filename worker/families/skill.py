"""Seed 002: JSON-ReAct skill prompts (the seed's PromptBuilder, as functions).

`skill_react` is one system message; `skill_error_observation` is the user message the
seed appends after a failed tool call.
"""

from collections.abc import Mapping, Sequence
from typing import Any

from schemas.families import AvailableFile, Skill, SkillTool
from schemas.job import Job, Kind
from worker.families.base import (
    BuildResult,
    Family,
    RenderContext,
    probe_renderings,
    template_version,
)
from worker.families.budget import NOTHING, Plan

# Verbatim; it starts and ends with a newline, as the seed's triple-quoted string does.
AUTONOMOUS_SKILL_SYSTEM_PROMPT = """
You are executing the '{skill_name}' skill autonomously.

SKILL INSTRUCTIONS:
{skill_content}

{available_files_section}

AVAILABLE TOOLS:
{tool_descriptions}

EXECUTION FORMAT:
You must respond in JSON format with one of these structures:

1. When you need to call a tool:
{{
    "thought": "Your reasoning about what to do next",
    "action": "tool_name",
    "action_input": {{"arg1": "value1", "arg2": "value2"}},
    "is_final": false
}}

2. When you have completed the task:
{{
    "thought": "Your final reasoning",
    "final_answer": "Your complete response to the user",
    "is_final": true
}}

RULES:
- Think step by step about how to accomplish the task
- Use tools to gather information and perform actions
- If a tool fails, try an alternative approach
- Continue until the task is complete or you cannot make progress
- Provide clear, actionable final answers
- Always respond with valid JSON in the format above

Current iteration: {iteration}/{max_iterations}
"""

AVAILABLE_FILES_HEADER = "AVAILABLE SUPPORTING FILES (load on-demand with 'read' tool):"
AVAILABLE_FILES_FOOTER = "Use the 'read' tool to load these files when you need their content."
ERROR_OBSERVATION_TEMPLATE = (
    "Tool '{tool_name}' failed: {error}\n"
    "Attempt {retry_count}. Please try again with different parameters "
    "or use an alternative approach."
)

TEMPLATES: tuple[str, ...] = (
    AUTONOMOUS_SKILL_SYSTEM_PROMPT,
    AVAILABLE_FILES_HEADER,
    AVAILABLE_FILES_FOOTER,
    ERROR_OBSERVATION_TEMPLATE,
)


def build_system_prompt(
    skill: Skill,
    tool_descriptions: str,
    available_files_section: str,
    iteration: int,
    max_iterations: int,
) -> str:
    return AUTONOMOUS_SKILL_SYSTEM_PROMPT.format(
        skill_name=skill.name,
        skill_content=skill.content,
        available_files_section=available_files_section,
        tool_descriptions=tool_descriptions,
        iteration=iteration,
        max_iterations=max_iterations,
    )


def format_tool_descriptions(
    tools: Sequence[SkillTool], allowed_tools: Sequence[str] | None = None
) -> str:
    """One `- name: description` line per tool, plus its parameters printed with str().

    An empty `allowed_tools` filters nothing, as in the seed (it tests truthiness).
    """
    lines = []
    for tool in tools:
        if allowed_tools and tool.name not in allowed_tools:
            continue
        lines.append(f"- {tool.name}: {tool.description}")
        if tool.parameters:
            lines.append(f"  Parameters: {tool.parameters}")
    return "\n".join(lines)


def build_available_files_section(
    available_files: Mapping[str, AvailableFile], skill_dir: str
) -> str:
    """Supporting files sorted by name, then the skill directory; empty without files."""
    if not available_files:
        return ""
    lines = [AVAILABLE_FILES_HEADER]
    for filename, ref in sorted(available_files.items(), key=lambda item: item[0]):
        line = f"- {filename}"
        if ref.description:
            line += f": {ref.description}"
        if ref.estimated_lines:
            line += f" ({ref.estimated_lines:,} lines)"
        lines.append(line)
    lines.append("")
    lines.append(f"Skill directory: {skill_dir}")
    lines.append(AVAILABLE_FILES_FOOTER)
    return "\n".join(lines)


def build_error_observation(tool_name: str, error: str, retry_count: int) -> str:
    return ERROR_OBSERVATION_TEMPLATE.format(
        tool_name=tool_name, error=error, retry_count=retry_count
    )


def build(job: Job, ctx: RenderContext) -> BuildResult:
    if job.kind is Kind.SKILL_REACT and job.skill_react is not None:
        payload = job.skill_react
        content = build_system_prompt(
            payload.skill,
            format_tool_descriptions(payload.tools, payload.allowed_tools),
            build_available_files_section(payload.available_files, payload.skill_dir),
            payload.iteration,
            payload.max_iterations,
        )
        return BuildResult(messages=[{"role": "system", "content": content}])
    if job.kind is Kind.SKILL_ERROR_OBSERVATION and job.skill_error_observation is not None:
        observation = job.skill_error_observation
        content = build_error_observation(
            observation.tool_name, observation.error, observation.retry_count
        )
        return BuildResult(messages=[{"role": "user", "content": content}])
    # Validation pairs each kind with its payload, so this is a caller bug.
    raise ValueError(f"job {job.job_id!r}: kind {job.kind.value!r} has no skill payload")


# Probe jobs reaching every branch: their renderings are versioned with the constants,
# so text written inline (the "(n lines)" suffix, "Skill directory:") moves the version.
_PROBE_JOBS: list[dict[str, Any]] = [
    {
        "kind": "skill_react",
        "skill_react": {
            "skill": {"name": "n", "content": "c"},
            "tools": [
                {"name": "a", "description": "d", "parameters": {"p": 1}},
                {"name": "b", "description": "d"},
                {"name": "hidden", "description": "d"},
            ],
            "allowed_tools": ["a", "b"],
            "available_files": {
                "f.md": {"description": "d", "estimated_lines": 1000},
                "g.md": {},
            },
            "skill_dir": "/s",
        },
    },
    {"kind": "skill_react", "skill_react": {"skill": {"name": "n"}}},
    {
        "kind": "skill_error_observation",
        "skill_error_observation": {"tool_name": "t", "error": "e"},
    },
]


def versioned_texts() -> tuple[str, ...]:
    """The template constants plus the renderings of the probe jobs."""
    return (*TEMPLATES, *probe_renderings(build, _PROBE_JOBS, RenderContext()))


# A budget may shorten the middle of a failed tool's error; nothing else of a skill job
# is ever cut (CONTRACT.md §11).
_ERROR_PLAN = Plan(texts=(("skill_error_observation.error", ("skill_error_observation", "error")),))


def plan_for(job: Job) -> Plan:
    return _ERROR_PLAN if job.kind is Kind.SKILL_ERROR_OBSERVATION else NOTHING


FAMILY = Family("skill", template_version("skill", versioned_texts()), build, plan_for=plan_for)
