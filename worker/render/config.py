"""The worker's YAML configuration (`worker.yaml`): MCP registry, masking, prompts.

Loaded once at start-up. A malformed file is a `ConfigError` naming the file and the
problem; the CLI turns it into a one-line message and exit code 2, never a traceback.
"""

import os
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from worker.errors import ConfigError
from worker.families.contributors import ContributorDefinition
from worker.families.mcp_servers import MCPServerRegistry
from worker.families.system_prompt.config import (
    FAMILY_NAME,
    PromptDefinition,
    SystemPromptConfig,
)
from worker.masking.config import CustomPattern, MaskingConfig
from worker.render import config_cache

if TYPE_CHECKING:
    import yaml

CONFIG_ENV = "PROMPT_WORKER_CONFIG"


class MCPServerConfig(BaseModel):
    # A misspelt key (`instructons:`) is rejected like an unknown top-level key:
    # ignored, it would drop the server's instructions from every prompt unnoticed.
    model_config = ConfigDict(extra="forbid", frozen=True)

    instructions: str = ""


class WorkerConfig(BaseModel):
    # Unknown top-level keys are rejected: a typo such as `mcp_server:` would otherwise
    # silently drop every tier-2 instruction from every prompt.
    model_config = ConfigDict(extra="forbid", frozen=True)

    mcp_servers: dict[str, MCPServerConfig] = Field(default_factory=dict)
    masking: MaskingConfig = Field(default_factory=MaskingConfig)
    prompts: list[PromptDefinition] = Field(default_factory=list)
    contributors: list[ContributorDefinition] = Field(default_factory=list)
    templates_dir: Path | None = None

    def registry(self) -> MCPServerRegistry:
        """The MCP server registry every family's tier 2 reads."""
        return MCPServerRegistry(
            MappingProxyType({sid: cfg.instructions for sid, cfg in self.mcp_servers.items()})
        )

    def system_prompt(self) -> SystemPromptConfig:
        """The `system_prompt` family's section: its prompt registry and templates."""
        return SystemPromptConfig(prompts=tuple(self.prompts), templates_dir=self.templates_dir)

    def section(self, family: str) -> object:
        """The section of the file `family` reads at start-up (None: it reads none)."""
        if family == FAMILY_NAME:
            return self.system_prompt()
        return None


def _format_validation_error(error: ValidationError) -> str:
    parts = []
    for item in error.errors():
        where = ".".join(str(p) for p in item["loc"]) or "(top level)"
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            message = _unknown_key(item["loc"])
        parts.append(f"{where}: {message}")
    return "; ".join(parts)


def _unknown_key(loc: tuple[int | str, ...]) -> str:
    """ "unknown key", with the keys allowed there and the likeliest one meant."""
    # List indexes and MCP server ids stand for any: "*".
    section = tuple(
        "*" if isinstance(part, int) or (n == 1 and loc[0] == "mcp_servers") else part
        for n, part in enumerate(loc[:-1])
    )
    model = _SECTIONS.get(section)
    if model is None:
        return "unknown key"
    known = sorted(model.model_fields)
    message = f"unknown key (known: {', '.join(known)})"
    import difflib  # only a faulty configuration needs it

    close = difflib.get_close_matches(str(loc[-1]), known, n=1)
    if close:
        message += f"; did you mean {close[0]!r}?"
    return message


# Where in worker.yaml each model of it stands, for `_unknown_key`.
_SECTIONS: dict[tuple[int | str, ...], type[BaseModel]] = {
    (): WorkerConfig,
    ("mcp_servers", "*"): MCPServerConfig,
    ("masking",): MaskingConfig,
    ("masking", "patterns", "*"): CustomPattern,
    ("prompts", "*"): PromptDefinition,
    ("contributors", "*"): ContributorDefinition,
}


def _yaml_error(source: str, exc: "yaml.YAMLError") -> str:
    """One line: file, line and column (1-based, as editors count), and the problem."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    if context:
        context_mark = getattr(exc, "context_mark", None)
        if context_mark is not None:
            context += f" at line {context_mark.line + 1}, column {context_mark.column + 1}"
        problem = f"{problem} ({context})"
    if mark is None:
        return f"{source}: not valid YAML: {problem}"
    return f"{source}:{mark.line + 1}:{mark.column + 1}: not valid YAML: {problem}"


def parse_config(data: Any, source: str = "<config>") -> WorkerConfig:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}: expected a mapping at the top level, got {type(data).__name__}"
        )
    try:
        config = WorkerConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {_format_validation_error(exc)}") from None
    if config.templates_dir is not None and not config.templates_dir.is_absolute():
        # Relative to the config file, so a config and its templates travel together.
        base = Path(source).parent if source != "<config>" else Path.cwd()
        config = config.model_copy(update={"templates_dir": base / config.templates_dir})
    return config


def load_config(path: str | os.PathLike[str] | None = None) -> WorkerConfig:
    """Load `path`, else $PROMPT_WORKER_CONFIG, else the empty configuration."""
    if path is None:
        path = os.environ.get(CONFIG_ENV) or None
    if path is None:
        return WorkerConfig()
    source = os.fspath(path)
    try:
        text = Path(source).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{source}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{source}: cannot read: {exc}") from None
    return parse_config(_parsed(text, source), source)


def _parsed(text: str, source: str) -> Any:
    """The YAML document in `text`: as parsed by an earlier run when the cache has it
    (no PyYAML import), else parsed now, and kept for the next run."""
    found, data = config_cache.load(text)
    if found:
        return data
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(_yaml_error(source, exc)) from None
    config_cache.store(text, data)
    return data
