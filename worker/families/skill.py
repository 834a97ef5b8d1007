"""Seed 002: JSON-ReAct skill prompts.

PLACEHOLDER: the families issue implements it.
"""

from schemas.job import Job
from worker.family import BuildResult, Family, RenderContext, template_version

TEMPLATES: tuple[str, ...] = ()


def build(job: Job, ctx: RenderContext) -> BuildResult:
    raise NotImplementedError("skill family not implemented yet")


FAMILY = Family("skill", template_version("skill", TEMPLATES), build)
