"""Seed 001: the LangChain-era TARSy prompt builder, without LangChain.

PLACEHOLDER: the families issue implements it.
"""

from schemas.job import Job
from worker.family import BuildResult, Family, RenderContext, template_version

TEMPLATES: tuple[str, ...] = ()


def build(job: Job, ctx: RenderContext) -> BuildResult:
    raise NotImplementedError("legacy family not implemented yet")


FAMILY = Family("legacy", template_version("legacy", TEMPLATES), build)
