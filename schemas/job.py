"""The build-prompt job (CONTRACT.md §2).

Field-level rules live in the models; rules that span fields (which payload goes with
which kind, "at most one of") live in `kind_rule_violations`, so each violation can name
the exact field path the producer has to fix.
"""

from enum import StrEnum
from typing import Any, Literal

from pydantic import Field, field_validator

from schemas.base import NonEmptyStr, PositiveInt, WireModel
from schemas.budget import Budget
from schemas.families import LegacyPayload, SkillErrorObservationPayload, SkillReactPayload
from schemas.system_prompt import SystemPromptPayload


class Kind(StrEnum):
    REACT = "react"
    NATIVE_THINKING = "native_thinking"
    SYNTHESIS = "synthesis"
    FORCED_CONCLUSION = "forced_conclusion"
    MCP_SUMMARIZATION = "mcp_summarization"
    EXECUTIVE_SUMMARY = "executive_summary"
    LEGACY_REACT = "legacy_react"
    LEGACY_STAGE_REACT = "legacy_stage_react"
    LEGACY_FINAL_ANALYSIS = "legacy_final_analysis"
    LEGACY_TOOL_SELECTION = "legacy_tool_selection"
    LEGACY_ITERATIVE_TOOL_SELECTION = "legacy_iterative_tool_selection"
    SKILL_REACT = "skill_react"
    SKILL_ERROR_OBSERVATION = "skill_error_observation"
    SYSTEM_PROMPT = "system_prompt"


# TARSy's own spellings, accepted so TARSy producers need no translation table.
KIND_ALIASES: dict[str, Kind] = {
    "native-thinking": Kind.NATIVE_THINKING,
    "synthesis-native-thinking": Kind.SYNTHESIS,
}

INVESTIGATION_KINDS = frozenset({Kind.REACT, Kind.NATIVE_THINKING, Kind.SYNTHESIS})
CHAT_KINDS = frozenset({Kind.REACT, Kind.NATIVE_THINKING})
LEGACY_KINDS = frozenset(
    {
        Kind.LEGACY_REACT,
        Kind.LEGACY_STAGE_REACT,
        Kind.LEGACY_FINAL_ANALYSIS,
        Kind.LEGACY_TOOL_SELECTION,
        Kind.LEGACY_ITERATIVE_TOOL_SELECTION,
    }
)

# Payload field -> the kinds it belongs to. A payload sent with any other kind is a
# producer bug (it would be silently unused), so it is reported as invalid.
PAYLOAD_KINDS: dict[str, frozenset[Kind]] = {
    "forced_conclusion": frozenset({Kind.FORCED_CONCLUSION}),
    "mcp_summarization": frozenset({Kind.MCP_SUMMARIZATION}),
    "executive_summary": frozenset({Kind.EXECUTIVE_SUMMARY}),
    "legacy": LEGACY_KINDS,
    "skill_react": frozenset({Kind.SKILL_REACT}),
    "skill_error_observation": frozenset({Kind.SKILL_ERROR_OBSERVATION}),
    "system_prompt": frozenset({Kind.SYSTEM_PROMPT}),
}


class Session(WireModel):
    session_id: str | None = None
    alert_type: str = ""
    alert_data: str = Field("", description="Opaque text, passed through as-is after masking.")
    runbook_content: str = ""


class TimelineEvent(WireModel):
    event_type: str
    content: str


class PreviousAttempt(WireModel):
    """A failed earlier run of this stage (seed 004, CONTRACT.md §10)."""

    attempt_number: PositiveInt
    error_message: str | None = None
    previous_output: str | None = None
    previous_attempt_at: str | None = None


class Stage(WireModel):
    stage_id: str | None = None
    stage_name: str | None = None
    agent_name: str | None = None
    mcp_servers: list[str] = Field(
        default_factory=list,
        description="MCP server ids, order kept; ids not in the registry are skipped.",
    )
    custom_instructions: str = ""
    previous_stage_context: str | None = Field(
        None, description="Pre-formatted context; at most one of this and previous_stage_events."
    )
    previous_stage_events: list[TimelineEvent] | None = None
    previous_attempt: PreviousAttempt | None = None


class Tool(WireModel):
    name: str
    description: str = ""
    input_schema: dict[str, Any] | None = Field(
        None, description="JSON Schema object describing the tool's parameters."
    )


class HistoryMessage(WireModel):
    role: Literal["assistant", "user", "tool", "system"]
    content: str


class ChatExchange(WireModel):
    user_question: str
    messages: list[HistoryMessage] = Field(default_factory=list)


class Chat(WireModel):
    user_question: NonEmptyStr
    investigation_context: str | None = Field(
        None, description="Pre-formatted context; at most one of this and investigation_events."
    )
    investigation_events: list[TimelineEvent] | None = None
    history: list[ChatExchange] = Field(default_factory=list)


class Strategy(StrEnum):
    REACT = "react"
    NATIVE_THINKING = "native_thinking"


class ForcedConclusion(WireModel):
    iteration: PositiveInt
    strategy: Strategy = Field(Strategy.REACT, strict=False)

    @field_validator("strategy", mode="before")
    @classmethod
    def _accept_tarsy_spelling(cls, value: Any) -> Any:
        return "native_thinking" if value == "native-thinking" else value


class McpSummarization(WireModel):
    server_name: str = ""
    tool_name: str = ""
    max_summary_tokens: PositiveInt
    conversation_context: str = ""
    result_text: str = ""


class ExecutiveSummary(WireModel):
    final_analysis: str = ""


class Job(WireModel):
    """One build-prompt request."""

    job_id: NonEmptyStr
    # Enum fields are lax so that python-mode validation (the worker parses with orjson
    # first) accepts their string values; every other field stays strict.
    kind: Kind = Field(strict=False)
    session: Session = Field(default_factory=Session)
    stage: Stage = Field(default_factory=Stage)
    tools: list[Tool] = Field(
        default_factory=list,
        description="Written into the prompt for react only; other kinds accept and ignore them.",
    )
    chat: Chat | None = Field(None, description="Chat mode; react and native_thinking only.")
    forced_conclusion: ForcedConclusion | None = None
    mcp_summarization: McpSummarization | None = None
    executive_summary: ExecutiveSummary | None = None
    legacy: LegacyPayload | None = None
    skill_react: SkillReactPayload | None = None
    skill_error_observation: SkillErrorObservationPayload | None = None
    system_prompt: SystemPromptPayload | None = None
    budget: Budget | None = Field(
        None,
        description="The model's prompt-token budget: over it, the least important material "
        "is left out, visibly; any kind.",
    )

    @field_validator("kind", mode="before")
    @classmethod
    def _resolve_alias(cls, value: Any) -> Any:
        if isinstance(value, str):
            return KIND_ALIASES.get(value, value)
        return value


def required_payload(kind: Kind) -> str | None:
    """The payload field a kind cannot do without, if any."""
    for field, kinds in PAYLOAD_KINDS.items():
        if kind in kinds:
            return field
    return None


def kind_rule_violations(job: Job) -> list[dict[str, str]]:
    """Cross-field rules of CONTRACT.md §2, each as {"field", "type", "message"}."""
    problems: list[dict[str, str]] = []
    kind = job.kind

    def bad(field: str, type_: str, message: str) -> None:
        problems.append({"field": field, "type": type_, "message": message})

    needed = required_payload(kind)
    if needed is not None and getattr(job, needed) is None:
        bad(needed, "missing", f"kind {kind.value!r} requires the {needed!r} payload")
    for field, kinds in PAYLOAD_KINDS.items():
        if kind not in kinds and getattr(job, field) is not None:
            allowed = ", ".join(sorted(k.value for k in kinds))
            bad(field, "payload_kind_mismatch", f"{field!r} is only valid with kind {allowed}")

    if job.chat is not None:
        if kind not in CHAT_KINDS:
            bad(
                "chat",
                "payload_kind_mismatch",
                "'chat' is only valid with kind react or native_thinking",
            )
        if job.chat.investigation_context is not None and job.chat.investigation_events is not None:
            bad(
                "chat.investigation_events",
                "mutually_exclusive",
                "give at most one of chat.investigation_context and chat.investigation_events",
            )
        if job.stage.previous_attempt is not None:
            bad(
                "stage.previous_attempt",
                "payload_kind_mismatch",
                "a chat job cannot carry stage.previous_attempt (reruns are for investigations)",
            )
    if job.stage.previous_stage_context is not None and job.stage.previous_stage_events is not None:
        bad(
            "stage.previous_stage_events",
            "mutually_exclusive",
            "give at most one of stage.previous_stage_context and stage.previous_stage_events",
        )
    return problems
