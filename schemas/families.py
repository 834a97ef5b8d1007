"""Payloads of the seed-001 (legacy TARSy) and seed-002 (JSON-ReAct skill) families (CONTRACT.md §8).

The seed-001 builder reads plain dicts with `dict.get`, so a key that is present with
a null value renders differently from a missing key, and `available_tools` is dumped
to the prompt as received (every key, in the producer's order). Those parts of the
payload are therefore kept as the producer's own dicts: the TypedDicts below only
check that the seed code can read them (each problem reported with its field path),
they never reshape what is rendered.
"""

from typing import Annotated, Any, NotRequired

from pydantic import (
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidatorFunctionWrapHandler,
    WithJsonSchema,
    WrapValidator,
    with_config,
)
from pydantic_core import PydanticCustomError
from typing_extensions import TypedDict

from schemas.base import PositiveInt, WireModel

DEFAULT_TASK_FOCUS = "investigation and providing recommendations"

# ---------------------------------------------------------------- seed 001 (legacy)


class LegacyToolProperty(TypedDict):
    """One entry of `input_schema.properties`: the seed calls `.get` on it."""

    description: NotRequired[str]


class LegacyToolSchema(TypedDict):
    properties: NotRequired[dict[str, LegacyToolProperty]]


@with_config(
    ConfigDict(
        strict=True, json_schema_extra={"anyOf": [{"required": ["name"]}, {"required": ["tool"]}]}
    )
)
class LegacyToolShape(TypedDict):
    server: NotRequired[str]
    name: NotRequired[str]
    tool: NotRequired[str]
    description: NotRequired[str]
    input_schema: NotRequired[LegacyToolSchema]


def _checked_but_as_received(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    # The handler reports shape errors with their full path; the value returned is the
    # producer's dict itself, because tool selection prompts json.dumps it verbatim.
    handler(value)
    if "name" not in value and "tool" not in value:
        raise PydanticCustomError("missing", "a legacy tool needs a 'name' (or 'tool')")
    return value


LegacyTool = Annotated[LegacyToolShape, WrapValidator(_checked_but_as_received)]


class McpCallRecord(TypedDict):
    """One tool call of an iteration's `mcp_data` list."""

    tool: NotRequired[Any]
    # The seed looks up `parameters['kind']`, which only a mapping supports.
    parameters: NotRequired[dict[str, Any]]
    result: NotRequired[Any]
    error: NotRequired[Any]


def _server_data_kind(value: Any) -> str:
    return "calls" if isinstance(value, list) else "data"


# A list holds per-call records (read with `.get`); anything else is printed as data.
ServerData = Annotated[
    Annotated[list[McpCallRecord], Tag("calls")]
    | Annotated[Any, Tag("data"), WithJsonSchema({"not": {"type": "array"}})],
    Discriminator(_server_data_kind),
]


class IterationRecord(TypedDict):
    """One entry of the seed's `iteration_history` (only the keys the seed reads).

    Presence matters as in the seed: a `partial_analysis` key is rendered even when null.
    """

    tools_called: NotRequired[list[dict[str, Any]] | None]
    mcp_data: NotRequired[dict[str, ServerData] | None]
    partial_analysis: NotRequired[Any]


def _history_entry_kind(value: Any) -> str:
    return "lines" if isinstance(value, list) else "line"


# Tagged so that a bad entry gets one error at its own path, not one per alternative.
ReactHistoryEntry = Annotated[
    Annotated[str, Tag("line")] | Annotated[list[str], Tag("lines")],
    Discriminator(_history_entry_kind),
]


class LegacyPayload(WireModel):
    """The seed's `PromptContext`, as one object (CONTRACT.md §8, payload `legacy`)."""

    alert_data: dict[str, Any] = Field(description="Formatted by AlertSectionTemplate.")
    runbook_content: str | None = ""
    previous_stage_context: str | None = Field(
        "", description='Empty or null renders "No previous stage data available."'
    )
    tools: list[LegacyTool] = Field(
        default_factory=list, description="`available_tools` is {'tools': tools}."
    )
    react_history: list[ReactHistoryEntry] | None = Field(
        None, description="Lines, or lists of lines; empty means no history."
    )
    stage_name: str | None = ""
    is_final_stage: bool = False
    previous_stages: list[str] = Field(default_factory=list)
    agent_name: str = ""
    mcp_servers: list[str] = Field(default_factory=list)
    custom_instructions: str = ""
    server_guidance: str = ""
    task_focus: str = DEFAULT_TASK_FOCUS
    current_iteration: PositiveInt = 1
    max_iterations: PositiveInt | None = Field(None, description="null means 5.")
    iteration_history: list[IterationRecord] = Field(default_factory=list)


# ---------------------------------------------------------------- seed 002 (skill)


class Skill(WireModel):
    name: str
    content: str = ""


class SkillTool(WireModel):
    name: str
    description: str = ""
    # Printed with Python's str(), as the seed does: any JSON value, or absent.
    parameters: Any = None


class AvailableFile(WireModel):
    description: str | None = None
    estimated_lines: Annotated[int, Field(ge=0)] | None = None


class SkillReactPayload(WireModel):
    skill: Skill
    tools: list[SkillTool] = Field(default_factory=list)
    allowed_tools: list[str] | None = Field(
        None, description="Names of the tools to list; null or empty means all."
    )
    available_files: dict[str, AvailableFile] = Field(default_factory=dict)
    skill_dir: str = ""
    iteration: PositiveInt = 1
    max_iterations: PositiveInt = 15


class SkillErrorObservationPayload(WireModel):
    tool_name: str = ""
    error: str = ""
    retry_count: PositiveInt = 1
