"""Seed 003: tiered system prompts.

PLACEHOLDER: the tiered-prompts issue implements it.
"""

from schemas.job import Job
from worker.family import BuildResult, Family, RenderContext, template_version

TEMPLATES: tuple[str, ...] = ()


def build(job: Job, ctx: RenderContext) -> BuildResult:
    raise NotImplementedError("system_prompt family not implemented yet")


FAMILY = Family("system_prompt", template_version("system_prompt", TEMPLATES), build)
