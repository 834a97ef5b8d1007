"""Three-tier instruction composition (seed `ComposeInstructions`).

Tier 1 is a general text, tier 2 the registry's instructions for each MCP server the
stage uses (in the stage's order; unknown or empty ones skipped), tier 3 the agent's
custom instructions. The seed-001 family reuses this with its own tier-1 text.
"""

from collections.abc import Sequence

from worker.families.mcp_servers import MCPServerRegistry
from worker.families.tarsy.templates import (
    CHAT_GENERAL_INSTRUCTIONS,
    CHAT_RESPONSE_GUIDELINES,
    GENERAL_INSTRUCTIONS,
)


def compose_instructions(
    general: str,
    registry: MCPServerRegistry,
    mcp_servers: Sequence[str],
    custom_instructions: str,
) -> str:
    sections = [general]
    for server_id in mcp_servers:
        instructions = registry.get_instructions(server_id)
        if instructions:
            sections.append(f"## {server_id} Instructions\n\n{instructions}")
    if custom_instructions:
        sections.append(f"## Agent-Specific Instructions\n\n{custom_instructions}")
    return "\n\n".join(sections)


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
