"""The `system_prompt` family's section of worker.yaml: `prompts:` and `templates_dir:`.

Both are top-level keys of the file; `WorkerConfig.system_prompt()` gathers them into
`SystemPromptConfig`, which is all the family's start-up (`builder.prepare`) reads.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

# The family's name, which is also how the configuration finds its section.
FAMILY_NAME = "system_prompt"

NonEmpty = Annotated[str, Field(min_length=1)]


class PromptDefinition(BaseModel):
    """One core prompt (usually a skill) of the registry, as written in worker.yaml."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: NonEmpty
    name: NonEmpty
    content: str
    description: str | None = None
    tags: tuple[str, ...] = ()
    # Informational, as in seed 003: the worker does not check tools against it.
    required_tools: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SystemPromptConfig:
    """The family's configuration: prompts for its registry and a templates directory
    that overrides the bundled templates (None: the bundled ones only)."""

    prompts: tuple[PromptDefinition, ...] = ()
    templates_dir: Path | None = None
