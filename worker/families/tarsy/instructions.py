"""The tarsy family's instructions: the three tiers (families/instructions.py) with the
investigation or the chat text as tier 1; chat adds its response guidelines."""

from collections.abc import Sequence

from worker.families.instructions import compose_instructions
from worker.families.mcp_servers import MCPServerRegistry
from worker.families.tarsy.templates import (
    CHAT_GENERAL_INSTRUCTIONS,
    CHAT_RESPONSE_GUIDELINES,
    GENERAL_INSTRUCTIONS,
)


def compose_investigation_instructions(
    registry: MCPServerRegistry, mcp_servers: Sequence[str], custom_instructions: str
) -> str:
    return compose_instructions(GENERAL_INSTRUCTIONS, registry, mcp_servers, custom_instructions)


def compose_chat_instructions(
    registry: MCPServerRegistry, mcp_servers: Sequence[str], custom_instructions: str
) -> str:
    composed = compose_instructions(
        CHAT_GENERAL_INSTRUCTIONS, registry, mcp_servers, custom_instructions
    )
    return f"{composed}\n\n{CHAT_RESPONSE_GUIDELINES}"
