"""Seed 003: a system message scaled to the model's context window (CONTRACT.md §10).

Start-up (`prepare`) loads the templates and the prompt registry once; `build` is a
pure function of the job and that state.
"""

from dataclasses import dataclass
from importlib.resources import files

from schemas.job import Job
from schemas.system_prompt import DEFAULT_CONTEXT_TOKENS, SystemPromptPayload
from worker.families.base import BuildResult, Family, RenderContext, template_version
from worker.families.system_prompt.config import (
    FAMILY_NAME,
    PromptDefinition,
    SystemPromptConfig,
)
from worker.families.system_prompt.goal import render_goal
from worker.families.system_prompt.registry import (
    BUILTIN_PROMPTS,
    CORE_MANDATES_ID,
    SANITY_CHECK_ID,
    PromptRegistry,
)
from worker.families.system_prompt.store import (
    TemplateStore,
    all_keys,
    read_bundled,
    read_directory,
)
from worker.families.system_prompt.tiers import BUDGET_TOKENS, estimate_tokens, tier_for_context

NAME = FAMILY_NAME

# Read at import, which is start-up: the bundled set also feeds the template version.
BUNDLED_TEMPLATES = read_bundled(files("worker") / "templates" / "system_prompt")

TEMPLATES: tuple[str, ...] = (
    *(BUNDLED_TEMPLATES.get(key, "") for key in all_keys()),
    *(prompt.content for prompt in BUILTIN_PROMPTS),
)


@dataclass(frozen=True, slots=True)
class SystemPromptState:
    """What `prepare` builds once from the configuration."""

    store: TemplateStore
    registry: PromptRegistry
    mandates: str
    sanity_checks: str


def prepare(config: SystemPromptConfig) -> SystemPromptState:
    """The family's read-only state, built once at start-up; raises ConfigError."""
    configured = read_directory(config.templates_dir) if config.templates_dir is not None else {}
    registry = PromptRegistry.from_definitions(config.prompts)
    mandates = registry.get(CORE_MANDATES_ID)
    sanity = registry.get(SANITY_CHECK_ID)
    # Both are built-ins, so only a broken registry could lose them.
    assert mandates is not None and sanity is not None
    return SystemPromptState(
        store=TemplateStore.build(BUNDLED_TEMPLATES, configured),
        registry=registry,
        mandates=mandates.content,
        sanity_checks=sanity.content,
    )


def select_tier(payload: SystemPromptPayload) -> int:
    if payload.tier is not None:
        return payload.tier
    if payload.context_tokens is not None:
        return tier_for_context(payload.context_tokens)
    return tier_for_context(DEFAULT_CONTEXT_TOKENS)


def build_system_prompt(payload: SystemPromptPayload, state: SystemPromptState) -> BuildResult:
    tier = select_tier(payload)
    warnings: list[str] = []
    sections = [state.store.get(payload.mode, tier).text, state.mandates]
    if payload.goal is not None:
        sections.append(render_goal(payload.goal))
    asked: set[str] = set()
    for skill_id in payload.skills:
        # A repeated id would only spend the budget twice on the same text.
        if skill_id in asked:
            continue
        asked.add(skill_id)
        prompt = state.registry.get(skill_id)
        if prompt is None:
            warnings.append(f"skill {skill_id!r} is not in the prompt registry; skipped")
            continue
        sections.append(prompt.content)
    if payload.use_sanity_checks:
        sections.append(state.sanity_checks)
    sections.append(payload.additional_instructions.strip())

    text = "\n\n".join(section for section in sections if section)
    estimated = estimate_tokens(text)
    budget = BUDGET_TOKENS[tier]
    return BuildResult(
        messages=[{"role": "system", "content": text}],
        warnings=warnings,
        meta={
            "tier": tier,
            "budget_tokens": budget,
            "estimated_tokens": estimated,
            "over_budget": estimated > budget,
        },
    )


def build(job: Job, ctx: RenderContext) -> BuildResult:
    state = ctx.family_state.get(NAME)
    if not isinstance(state, SystemPromptState):
        raise RuntimeError(f"{NAME}: templates not loaded (the Renderer runs its prepare)")
    if job.system_prompt is None:
        raise ValueError("kind system_prompt requires the 'system_prompt' payload")
    return build_system_prompt(job.system_prompt, state)


# Reaches every line shape of the goal block, so text written inline in the code
# (headings, markers, "(IN PROGRESS)") moves the version as much as template text does.
PROBE_PAYLOAD = SystemPromptPayload.model_validate(
    {
        "tier": 1,
        "goal": {
            "description": "probe",
            "priority": "high",
            "status": "paused",
            "checkpoints": [
                {"description": "c", "status": status}
                for status in ("completed", "in-progress", "pending")
            ],
            "decisions": [
                {"description": "d", "locked": True},
                {"description": "d", "locked": False},
            ],
            "artifacts": [
                {"path": "p", "action": action} for action in ("created", "modified", "deleted")
            ],
        },
        "skills": ["probe"],
        "additional_instructions": "probe",
    }
)


def versioned_texts() -> tuple[str, ...]:
    """The bundled templates and built-in prompts, then the probe's rendering."""
    probe_skill = PromptDefinition(id="probe", name="probe", content="probe")
    state = prepare(SystemPromptConfig(prompts=(probe_skill,)))
    probe = build_system_prompt(PROBE_PAYLOAD, state)
    return (*TEMPLATES, *(message["content"] for message in probe.messages))


def prepare_section(section: object) -> SystemPromptState:
    """`prepare` as the families' registry calls it, with the family's section."""
    if not isinstance(section, SystemPromptConfig):
        raise TypeError(f"{NAME}: expected a SystemPromptConfig, got {type(section).__name__}")
    return prepare(section)


FAMILY = Family(NAME, template_version(NAME, versioned_texts()), build, prepare=prepare_section)
