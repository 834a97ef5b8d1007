"""Configuration of seed-003 prompts (`prompts:` in worker.yaml).

`templates_dir:` is a plain field of `WorkerConfig`; the template store reads it once
at start-up (`store.py`).
"""

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

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
