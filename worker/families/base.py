"""What every prompt family has in common: its entry point's signature and result.

A family is a pure function `build(job, ctx) -> BuildResult` plus the version hash of
its templates. `ctx` carries what builders read besides the job, built once at start-up
from the configuration: the MCP server registry and each family's own state, never the
configuration itself. Builders never do I/O.
"""

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from schemas.job import Job, Tool
from worker.families.budget import NOTHING, Plan
from worker.families.mcp_servers import MCPServerRegistry

Messages = list[dict[str, str]]


@dataclass(frozen=True, slots=True)
class BuildResult:
    messages: Messages
    warnings: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)


class ToolTexts(Protocol):
    """Where a family keeps the text it made of a tool list, for the next job that
    carries the very same list object. The renderer hands every job carrying a
    catalogue it has seen before that one object (render/catalogue.py), so the text
    is made once per catalogue, not once per job."""

    def text(self, tools: Sequence[Tool]) -> str | None: ...

    def remember_text(self, tools: Sequence[Tool], text: str) -> None: ...


class _NoToolTexts:
    """Keeps nothing: every list's text is made afresh."""

    def text(self, tools: Sequence[Tool]) -> None:
        return None

    def remember_text(self, tools: Sequence[Tool], text: str) -> None:
        return None


NO_TOOL_TEXTS: ToolTexts = _NoToolTexts()


@dataclass(frozen=True, slots=True)
class RenderContext:
    """Read-only inputs of the builders besides the job, made once at start-up."""

    registry: MCPServerRegistry = field(default_factory=MCPServerRegistry)
    tool_texts: ToolTexts = NO_TOOL_TEXTS
    # Family-specific state prepared at start-up from the family's own section of the
    # configuration (e.g. the seed-003 template store), keyed by family name, so one
    # family's setup cost is never paid per job.
    family_state: Mapping[str, Any] = field(default_factory=dict)


Builder = Callable[[Job, RenderContext], BuildResult]

# (message index, characters): where a job's prompt stops being stable as its session
# grows (CONTRACT.md §11.1); None: nothing of the job grows, the whole prompt is stable.
StablePoint = tuple[int, int] | None
# The stable point of `messages`, built from `job` (trimmed or not) by the family.
StableEnd = Callable[[Job, Messages], StablePoint]


def nothing_grows(job: Job, messages: Messages) -> StablePoint:
    return None


def nothing_is_cut(job: Job) -> Plan:
    return NOTHING


class ConfigSections(Protocol):
    """The worker's configuration as the families' start-up reads it: each family gets
    its own section, never all of it."""

    def section(self, family: str) -> object:
        """The section of `family` (None: the configuration has none for it)."""
        ...


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    template_version: str
    build: Builder
    # Builds the family's read-only state once at start-up from its own section of the
    # configuration; `build` finds it in `RenderContext.family_state[name]`. None: the
    # family needs none.
    prepare: Callable[[object], object] | None = None
    # Where a growing session's prompt changes (families/<family>/growth.py).
    stable_end: StableEnd = nothing_grows
    # What a budget may cut from a job, in which order (families/budget.py).
    plan_for: Callable[[Job], Plan] = nothing_is_cut


def template_version(family: str, texts: Iterable[str]) -> str:
    """A stable hash of a family's template texts: `<family>-<12 hex digits>`.

    Order matters and is fixed by the caller (declaration order), so the version only
    moves when a template's text moves.
    """
    digest = hashlib.sha256()
    for text in texts:
        data = text.encode("utf-8")
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return f"{family}-{digest.hexdigest()[:12]}"


def probe_renderings(
    build: Builder, probes: Iterable[Mapping[str, Any]], ctx: RenderContext
) -> list[str]:
    """Role and content of every message `build` makes of the probe jobs.

    Families hash these with their template constants (`template_version`): probes
    that reach every branch make text written inline in the code move the version as
    much as a template's text does.
    """
    rendered: list[str] = []
    for probe in probes:
        job = Job.model_validate({"job_id": "probe", **probe})
        rendered.extend(m["role"] + "\n" + m["content"] for m in build(job, ctx).messages)
    return rendered
