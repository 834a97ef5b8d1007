"""Three-tier instruction composition (seed 000's `ComposeInstructions`), shared by the
tarsy and legacy families: each gives its own tier-1 text.

Tier 1 is a general text, tier 2 the registry's instructions for each MCP server the
stage uses (in the stage's order; unknown or empty ones skipped), tier 3 the agent's
custom instructions.
"""

from collections.abc import Sequence

from worker.families.mcp_servers import MCPServerRegistry


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
