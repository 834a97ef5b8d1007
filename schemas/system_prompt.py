"""Payload of the `system_prompt` kind (seed 003, CONTRACT.md §10).

The producer names the model's context window (`context_tokens`) or the prompt tier
directly (`tier`), never both: with two sources of truth a producer bug would be
silently resolved one way or the other. With neither, the context window defaults to
`DEFAULT_CONTEXT_TOKENS` (CONTRACT.md §10's example value), which selects tier 2.
"""

from enum import StrEnum
from typing import Annotated

from pydantic import Field, model_validator

from schemas.base import NonEmptyStr, PositiveInt, WireModel

DEFAULT_CONTEXT_TOKENS = 8192


class Mode(StrEnum):
    ASSISTANT = "assistant"
    DEVELOPER = "developer"
    PLANNING = "planning"
    DEBUGGER = "debugger"
    USER = "user"


class GoalPriority(StrEnum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


class GoalStatus(StrEnum):
    ACTIVE = "active"
    PAUSED = "paused"
    COMPLETED = "completed"


class CheckpointStatus(StrEnum):
    PENDING = "pending"
    IN_PROGRESS = "in-progress"
    COMPLETED = "completed"


class ArtifactType(StrEnum):
    FILE = "file"
    TEST = "test"
    DOCUMENTATION = "documentation"


class ArtifactAction(StrEnum):
    CREATED = "created"
    MODIFIED = "modified"
    DELETED = "deleted"


Tier = Annotated[int, Field(ge=1, le=5)]

# Enum fields are lax (`strict=False`) as in schemas/job.py: the worker validates the
# parsed JSON in python mode, where a strict enum field would refuse its own values.


class Checkpoint(WireModel):
    description: NonEmptyStr
    status: CheckpointStatus = Field(CheckpointStatus.PENDING, strict=False)


class Decision(WireModel):
    description: NonEmptyStr
    # Kept for the producer's records; the goal block of CONTRACT.md §10 does not show it.
    rationale: str = ""
    locked: bool = False


class Artifact(WireModel):
    # Not rendered either (the goal block shows action and path), but validated so a
    # producer typo is reported rather than carried along.
    type: ArtifactType = Field(ArtifactType.FILE, strict=False)
    path: NonEmptyStr
    action: ArtifactAction = Field(strict=False)


class Goal(WireModel):
    description: NonEmptyStr
    priority: GoalPriority = Field(GoalPriority.MEDIUM, strict=False)
    status: GoalStatus = Field(GoalStatus.ACTIVE, strict=False)
    checkpoints: list[Checkpoint] = Field(default_factory=list)
    decisions: list[Decision] = Field(default_factory=list)
    artifacts: list[Artifact] = Field(default_factory=list)


class SystemPromptPayload(WireModel):
    mode: Mode = Field(Mode.ASSISTANT, strict=False)
    context_tokens: PositiveInt | None = Field(
        None,
        description="The model's context window in tokens; selects the tier. "
        f"Give this or `tier`, not both; with neither, {DEFAULT_CONTEXT_TOKENS} is assumed.",
    )
    tier: Tier | None = Field(None, description="Prompt tier 1..5, instead of context_tokens.")
    goal: Goal | None = None
    skills: list[str] = Field(
        default_factory=list, description="Prompt ids from the registry, in assembly order."
    )
    use_sanity_checks: bool = True
    additional_instructions: str = ""

    @model_validator(mode="after")
    def _one_tier_source(self) -> "SystemPromptPayload":
        if self.context_tokens is not None and self.tier is not None:
            raise ValueError("give at most one of context_tokens and tier")
        return self
