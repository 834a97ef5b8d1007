"""Prompt contributors (seed 004): configured text appended to system messages.

Each contributor names the kinds (or "all") and optionally the agents it applies to;
the applicable ones are appended to the end of the reply's system message in
ascending priority, ties broken by name, each after a blank line. Replies without a
system message (forced_conclusion, skill_error_observation) are left alone.

Everything that does not depend on the job is worked out in `from_config`, so a job
costs a dictionary lookup, and nothing at all when no contributor is configured.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Annotated, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from schemas.job import KIND_ALIASES, Job, Kind
from worker.errors import ConfigError

ALL = "all"

# Seed 004's episodic-memory guidance, verbatim (including the trailing space of
# "...in the knowledge graph. ").
EPISODIC_MEMORY = """\
## Episodic Memory Tool

You have access to episodic memory with three operations:

### RETAIN - Store New Episodes
Use RETAIN when you encounter:
- Important patterns or decisions
- Key code structures worth remembering
- Successful approaches to problems
Include contextual metadata: timestamp, entities involved, action taken.

### REFLECT - Build Connections (CRITICAL)
REFLECT is essential for building lasting knowledge. Simply retaining is not enough.
Use REFLECT:
- After completing significant actions - solidify what you learned
- When you see connections to prior work - strengthen those links
- Before moving to the next phase - consolidate understanding

The reflect operation builds connections in the knowledge graph.\x20
Without reflection, memories remain isolated and less useful.

### RECALL - Retrieve Prior Knowledge
Use RECALL at the start of new tasks to:
- Find similar prior analyses
- Retrieve relevant patterns
- Understand historical context

**Recommended Flow**: RECALL → Work → RETAIN key learnings → REFLECT on connections"""


class BuiltinContribution(StrEnum):
    EPISODIC_MEMORY = "episodic-memory"


BUILTIN_TEXT: Mapping[BuiltinContribution, str] = MappingProxyType(
    {BuiltinContribution.EPISODIC_MEMORY: EPISODIC_MEMORY}
)

NonEmpty = Annotated[str, Field(min_length=1)]


class ContributorDefinition(BaseModel):
    """One entry of `contributors:` in worker.yaml."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: NonEmpty
    priority: int = 0
    applies_to: tuple[NonEmpty, ...] = Field(
        default=(ALL,), min_length=1, description='Job kinds (TARSy aliases accepted) or "all".'
    )
    # None: every agent. An empty list would match nothing, which is never intended.
    agents: tuple[NonEmpty, ...] | None = Field(default=None, min_length=1)
    text: str | None = None
    builtin: BuiltinContribution | None = None

    @field_validator("applies_to")
    @classmethod
    def _known_kinds(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        known = {kind.value for kind in Kind} | set(KIND_ALIASES) | {ALL}
        unknown = [item for item in value if item not in known]
        if unknown:
            raise ValueError(
                f"unknown kind(s) {', '.join(map(repr, unknown))}; use job kinds or {ALL!r}"
            )
        return value

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if (self.text is None) == (self.builtin is None):
            raise ValueError("give exactly one of 'text' and 'builtin'")
        if self.text is not None and not self.text.strip():
            raise ValueError("'text' is empty")
        return self

    def kinds(self) -> frozenset[Kind]:
        if ALL in self.applies_to:
            return frozenset(Kind)
        return frozenset(KIND_ALIASES.get(item) or Kind(item) for item in self.applies_to)

    def contribution(self) -> str:
        if self.builtin is not None:
            return BUILTIN_TEXT[self.builtin]
        assert self.text is not None  # guaranteed by _one_source
        # One blank line before each contribution; a YAML block scalar's trailing
        # newline would otherwise leave a dangling line at the end of the prompt.
        return self.text.strip()


@dataclass(frozen=True, slots=True)
class _Rule:
    agents: frozenset[str] | None
    text: str

    def applies(self, agent_name: str | None) -> bool:
        return self.agents is None or agent_name in self.agents


class Contributors:
    """Applies the configured contributors to a reply's system message."""

    def __init__(self, rules_by_kind: Mapping[Kind, Sequence[_Rule]]) -> None:
        self._rules_by_kind = rules_by_kind

    @classmethod
    def from_config(cls, definitions: Sequence[ContributorDefinition]) -> "Contributors":
        names = [definition.name for definition in definitions]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ConfigError(f"contributors: name(s) used more than once: {', '.join(duplicates)}")
        ordered = sorted(definitions, key=lambda d: (d.priority, d.name))
        rules: dict[Kind, list[_Rule]] = {}
        for definition in ordered:
            rule = _Rule(
                agents=frozenset(definition.agents) if definition.agents is not None else None,
                text=definition.contribution(),
            )
            for kind in definition.kinds():
                rules.setdefault(kind, []).append(rule)
        return cls(MappingProxyType({kind: tuple(found) for kind, found in rules.items()}))

    def apply(self, job: Job, messages: list[dict[str, str]]) -> list[dict[str, str]]:
        """`messages` with the applicable contributions appended to the system message.

        The input list and its dicts are never modified (a builder may share them).
        """
        rules = self._rules_by_kind.get(job.kind)
        if not rules or not messages or messages[0].get("role") != "system":
            return messages
        agent = job.stage.agent_name
        if agent is None and job.legacy is not None:
            # Seed-001 jobs name their agent inside the legacy payload.
            agent = job.legacy.agent_name or None
        texts = [rule.text for rule in rules if rule.applies(agent)]
        if not texts:
            return messages
        system = messages[0]
        content = system["content"] + "".join("\n\n" + text for text in texts)
        return [{**system, "content": content}, *messages[1:]]
