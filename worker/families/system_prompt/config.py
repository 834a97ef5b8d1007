"""Configuration of seed-003 prompts (`prompts:` and `templates_dir:` in worker.yaml).

PLACEHOLDER: the tiered-prompts issue fills this in.
"""

from pydantic import BaseModel, ConfigDict


class PromptDefinition(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    name: str
    content: str
