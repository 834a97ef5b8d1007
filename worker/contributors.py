"""Prompt contributors (seed 004): configured text appended to system messages.

PLACEHOLDER: the tiered-prompts issue fills this in.
"""

from pydantic import BaseModel, ConfigDict


class ContributorDefinition(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    priority: int = 0
    text: str = ""


class Contributors:
    """Applies the configured contributors to a reply's system message.

    PLACEHOLDER interface: `from_config(defs)` once, `apply(job, messages)` per job.
    """

    def __init__(self, definitions: list[ContributorDefinition]) -> None:
        self.definitions = definitions

    @classmethod
    def from_config(cls, definitions: list[ContributorDefinition]) -> "Contributors":
        return cls(definitions)

    def apply(self, job: object, messages: list[dict[str, str]]) -> list[dict[str, str]]:
        return messages
