"""Which seed-001 prompts make up the messages of each `legacy_*` kind (CONTRACT.md §8)."""

from collections.abc import Callable
from types import MappingProxyType

from schemas.families import LegacyPayload
from schemas.job import Job, Kind
from worker.families.base import (
    BuildResult,
    Family,
    Messages,
    RenderContext,
    probe_renderings,
    template_version,
)
from worker.families.instructions import compose_instructions
from worker.families.legacy.budget_plans import plan_for
from worker.families.legacy.growth import stable_end
from worker.families.legacy.probes import PROBE_JOBS
from worker.families.legacy.prompts import (
    build_final_analysis_prompt,
    build_iterative_mcp_tool_selection_prompt,
    build_mcp_tool_selection_prompt,
    build_stage_analysis_react_prompt,
    build_standard_react_prompt,
    get_enhanced_react_system_message,
)
from worker.families.legacy.templates import (
    ALL_TEMPLATES,
    GENERAL_INSTRUCTIONS,
    ITERATIVE_MCP_TOOL_SELECTION_SYSTEM_MESSAGE,
    MCP_TOOL_SELECTION_SYSTEM_MESSAGE,
)
from worker.families.mcp_servers import MCPServerRegistry


def composed_instructions(payload: LegacyPayload, ctx: RenderContext) -> str:
    """Seed 000's three tiers, with seed 001's general instructions as tier 1."""
    return compose_instructions(
        GENERAL_INSTRUCTIONS, ctx.registry, payload.mcp_servers, payload.custom_instructions
    )


def _system_and_user(system: str, user: str) -> Messages:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def _react(payload: LegacyPayload, ctx: RenderContext) -> Messages:
    system = get_enhanced_react_system_message(
        composed_instructions(payload, ctx), payload.task_focus
    )
    return _system_and_user(system, build_standard_react_prompt(payload, payload.react_history))


def _stage_react(payload: LegacyPayload, ctx: RenderContext) -> Messages:
    system = get_enhanced_react_system_message(
        composed_instructions(payload, ctx), payload.task_focus
    )
    user = build_stage_analysis_react_prompt(payload, payload.react_history)
    return _system_and_user(system, user)


def _final_analysis(payload: LegacyPayload, ctx: RenderContext) -> Messages:
    return _system_and_user(
        composed_instructions(payload, ctx), build_final_analysis_prompt(payload)
    )


def _tool_selection(payload: LegacyPayload, ctx: RenderContext) -> Messages:
    return _system_and_user(
        MCP_TOOL_SELECTION_SYSTEM_MESSAGE, build_mcp_tool_selection_prompt(payload)
    )


def _iterative_tool_selection(payload: LegacyPayload, ctx: RenderContext) -> Messages:
    return _system_and_user(
        ITERATIVE_MCP_TOOL_SELECTION_SYSTEM_MESSAGE,
        build_iterative_mcp_tool_selection_prompt(payload),
    )


BUILDERS: dict[Kind, Callable[[LegacyPayload, RenderContext], Messages]] = {
    Kind.LEGACY_REACT: _react,
    Kind.LEGACY_STAGE_REACT: _stage_react,
    Kind.LEGACY_FINAL_ANALYSIS: _final_analysis,
    Kind.LEGACY_TOOL_SELECTION: _tool_selection,
    Kind.LEGACY_ITERATIVE_TOOL_SELECTION: _iterative_tool_selection,
}


# The kinds whose system message composes the MCP server instructions.
_COMPOSES_INSTRUCTIONS = frozenset(
    {Kind.LEGACY_REACT, Kind.LEGACY_STAGE_REACT, Kind.LEGACY_FINAL_ANALYSIS}
)


def build(job: Job, ctx: RenderContext) -> BuildResult:
    if job.legacy is None:  # validation guarantees it; a bare assert would vanish under -O
        raise ValueError(f"job {job.job_id!r}: kind {job.kind.value!r} needs the 'legacy' payload")
    messages = BUILDERS[job.kind](job.legacy, ctx)
    if job.kind in _COMPOSES_INSTRUCTIONS:
        return BuildResult(messages, ctx.registry.missing(job.legacy.mcp_servers))
    return BuildResult(messages)


def versioned_texts() -> tuple[str, ...]:
    """The template constants plus the renderings of the probe jobs."""
    ctx = RenderContext(registry=MCPServerRegistry(MappingProxyType({"probe": "p"})))
    return (*ALL_TEMPLATES, *probe_renderings(build, PROBE_JOBS, ctx))


FAMILY = Family(
    "legacy",
    template_version("legacy", versioned_texts()),
    build,
    stable_end=stable_end,
    plan_for=plan_for,
)
