"""Prompt families: each turns a validated, masked job into its messages.

`FAMILIES` says which family builds which kind. What the families share sits beside
them: `base.py` (the builder's signature, `RenderContext`), `mcp_servers.py` (the MCP
server registry), `instructions.py` (the three tiers) and `contributors.py` (text the
renderer appends to any family's system message). One family never imports another.
`prepare_states` runs each family's start-up from its own section of the configuration,
so the renderer needs to know no family by name.
"""

from schemas.job import Kind
from worker.families import legacy, skill
from worker.families.base import ConfigSections, Family
from worker.families.system_prompt import builder as system_prompt
from worker.families.tarsy import builder as tarsy

FAMILIES: dict[Kind, Family] = {
    Kind.REACT: tarsy.FAMILY,
    Kind.NATIVE_THINKING: tarsy.FAMILY,
    Kind.SYNTHESIS: tarsy.FAMILY,
    Kind.FORCED_CONCLUSION: tarsy.FAMILY,
    Kind.MCP_SUMMARIZATION: tarsy.FAMILY,
    Kind.EXECUTIVE_SUMMARY: tarsy.FAMILY,
    Kind.LEGACY_REACT: legacy.FAMILY,
    Kind.LEGACY_STAGE_REACT: legacy.FAMILY,
    Kind.LEGACY_FINAL_ANALYSIS: legacy.FAMILY,
    Kind.LEGACY_TOOL_SELECTION: legacy.FAMILY,
    Kind.LEGACY_ITERATIVE_TOOL_SELECTION: legacy.FAMILY,
    Kind.SKILL_REACT: skill.FAMILY,
    Kind.SKILL_ERROR_OBSERVATION: skill.FAMILY,
    Kind.SYSTEM_PROMPT: system_prompt.FAMILY,
}

assert set(FAMILIES) == set(Kind), "every kind needs a family"


def family_name(kind: str | None) -> str | None:
    """The name of the family that builds `kind` (a kind's wire value), None for a kind
    that is missing or not one of ours."""
    if kind is None:
        return None
    try:
        return FAMILIES[Kind(kind)].name
    except ValueError:
        return None


def prepare_states(config: ConfigSections) -> dict[str, object]:
    """Each family's start-up state (`Family.prepare`) from its own section of `config`,
    keyed by family name: the `RenderContext.family_state` the builders read."""
    families = {family.name: family for family in FAMILIES.values()}
    return {
        name: family.prepare(config.section(name))
        for name, family in families.items()
        if family.prepare is not None
    }
