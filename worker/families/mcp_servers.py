"""The MCP server registry: server id -> the instructions tier 2 adds for it."""

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class MCPServerRegistry:
    """Read-only view of the configured MCP servers.

    Unknown ids are not an error: the seed skips them ("logged elsewhere"), and a job
    naming a server this worker does not know still deserves a prompt.
    """

    instructions: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def get_instructions(self, server_id: str) -> str | None:
        return self.instructions.get(server_id)
