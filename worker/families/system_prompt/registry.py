"""The registry of core prompts (seed 003's PromptRegistry): built-ins plus worker.yaml.

Built once at start-up. A configured prompt may reuse a built-in id to replace its
text (operators tune the mandates without a release); two configured prompts with
the same id are a configuration error, since one would silently shadow the other.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

from worker.errors import ConfigError
from worker.families.system_prompt.config import PromptDefinition

CORE_MANDATES_ID = "core-mandates"
SANITY_CHECK_ID = "sanity-reality-check"

# Both are part of every tier-1 prompt, whose whole budget is 200 tokens (800
# characters): each word here is taken from the mode template's share.
CORE_MANDATES = """\
## Core Mandates
- Never invent facts, files, commands or tool results; say what you do not know.
- Follow the user's instructions; ask when a request is ambiguous.
- Never reveal secrets or act destructively without explicit approval."""

SANITY_REALITY_CHECK = """\
## Reality Check
Before answering, check your claims against the evidence you have; label assumptions as such."""


class PromptSource(StrEnum):
    STATIC = "static"
    CONFIG = "config"


@dataclass(frozen=True, slots=True)
class RegisteredPrompt:
    id: str
    name: str
    content: str
    source: PromptSource
    description: str | None = None
    tags: tuple[str, ...] = ()
    required_tools: tuple[str, ...] = ()


BUILTIN_PROMPTS: tuple[RegisteredPrompt, ...] = (
    RegisteredPrompt(CORE_MANDATES_ID, "Core Mandates", CORE_MANDATES, PromptSource.STATIC),
    RegisteredPrompt(SANITY_CHECK_ID, "Sanity Check", SANITY_REALITY_CHECK, PromptSource.STATIC),
)


@dataclass(frozen=True, slots=True)
class PromptRegistry:
    prompts: Mapping[str, RegisteredPrompt]

    @classmethod
    def from_definitions(cls, definitions: Iterable[PromptDefinition]) -> "PromptRegistry":
        prompts = {prompt.id: prompt for prompt in BUILTIN_PROMPTS}
        configured: set[str] = set()
        for definition in definitions:
            if definition.id in configured:
                raise ConfigError(f"prompts: id {definition.id!r} is defined more than once")
            configured.add(definition.id)
            prompts[definition.id] = RegisteredPrompt(
                id=definition.id,
                name=definition.name,
                # Sections are joined by one blank line; a YAML block scalar's trailing
                # newline would otherwise make it two.
                content=definition.content.strip(),
                source=PromptSource.CONFIG,
                description=definition.description,
                tags=definition.tags,
                required_tools=definition.required_tools,
            )
        return cls(MappingProxyType(prompts))

    def get(self, prompt_id: str) -> RegisteredPrompt | None:
        return self.prompts.get(prompt_id)
