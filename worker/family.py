"""What every prompt family has in common: its entry point's signature and result.

A family is a pure function `build(job, ctx) -> BuildResult` plus the version hash of
its templates. `ctx` carries the read-only state built once from the configuration;
builders never do I/O.
"""

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from schemas.job import Job
from worker.config import WorkerConfig
from worker.registry import MCPServerRegistry

Messages = list[dict[str, str]]


@dataclass(frozen=True, slots=True)
class BuildResult:
    messages: Messages
    warnings: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RenderContext:
    """Read-only inputs of the builders, made once from the configuration."""

    registry: MCPServerRegistry
    config: WorkerConfig
    # Family-specific state prepared at start-up (e.g. the seed-003 template store),
    # keyed by family name, so one family's setup cost is never paid per job.
    family_state: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_config(cls, config: WorkerConfig) -> "RenderContext":
        return cls(registry=config.registry(), config=config)


Builder = Callable[[Job, RenderContext], BuildResult]


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    template_version: str
    build: Builder
    # Optional start-up hook: builds the family's read-only state from the config
    # (stored in RenderContext.family_state[name]); may raise ConfigError.
    prepare: Callable[[WorkerConfig], Any] | None = None


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
