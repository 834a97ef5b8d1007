"""The MCP server registry: server id -> the instructions tier 2 adds for it."""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class MCPServerRegistry:
    """Read-only view of the configured MCP servers.

    Unknown ids are not an error: the seed skips them ("logged elsewhere"), and a job
    naming a server this worker does not know still deserves a prompt. The reply says
    so in `meta.warnings` (`missing`): a stale registry shows in every reply it spoils.
    """

    instructions: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def get_instructions(self, server_id: str) -> str | None:
        return self.instructions.get(server_id)

    def missing(self, server_ids: Iterable[str]) -> list[str]:
        """A `meta.warnings` entry for each id (once, in order) the registry lacks."""
        unknown = [sid for sid in server_ids if sid not in self.instructions]
        if not unknown:  # the usual case, on every job: no set, no strings
            return []
        return [
            f"MCP server {sid!r} is not in the MCP server registry; its instructions are left out"
            for sid in dict.fromkeys(unknown)
        ]
