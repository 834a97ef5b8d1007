"""The seed builder's helpers: tool lists, ReAct history and iteration history.

They read the producer's dicts with `dict.get` as the seed does, so a key sent as null
prints `None` where a missing key prints the seed's fallback.
"""

import json
from collections.abc import Mapping, Sequence
from typing import Any

from worker.families.legacy.templates import NO_ITERATIONS, NO_TOOLS

TRUNCATION_THRESHOLD = 3000
TRUNCATION_MARKER = "\n... [truncated for brevity]"


def format_available_actions(tools: Sequence[Mapping[str, Any]]) -> str:
    """_format_available_actions: one `server.tool: description` line per tool."""
    if not tools:
        return NO_TOOLS
    actions = []
    for tool in tools:
        action_name = (
            f"{tool.get('server', 'unknown')}.{tool.get('name', tool.get('tool', 'unknown'))}"
        )
        description = tool.get("description", "No description available")
        parameters = tool.get("input_schema", {}).get("properties", {})
        if parameters:
            param_desc = ", ".join(
                f"{name}: {schema.get('description', 'no description')}"
                for name, schema in parameters.items()
            )
            actions.append(f"{action_name}: {description}\n  Parameters: {param_desc}")
        else:
            actions.append(f"{action_name}: {description}")
    return "\n".join(actions)


def flatten_react_history(react_history: Sequence[str | Sequence[str]]) -> list[str]:
    """_flatten_react_history: entries may be lines or lists of lines."""
    flattened: list[str] = []
    for item in react_history:
        if isinstance(item, list):
            flattened.extend(str(subitem) for subitem in item)
        else:
            flattened.append(str(item))
    return flattened


def format_react_history(react_history: Sequence[str | Sequence[str]] | None) -> str:
    """The `history_text` of the ReAct prompts: the lines, each ending in a newline."""
    if not react_history:
        return ""
    return "\n".join(flatten_react_history(react_history)) + "\n"


def format_data(data: Any) -> str:
    """_format_data: objects and arrays as indented JSON, anything else with str()."""
    if isinstance(data, dict | list):
        try:
            return json.dumps(data, indent=2, default=str)
        except Exception:  # e.g. nesting too deep for the encoder; the seed falls back too
            return str(data)
    return str(data)


def _truncated(text: str) -> str:
    if len(text) > TRUNCATION_THRESHOLD:
        return text[:TRUNCATION_THRESHOLD] + TRUNCATION_MARKER
    return text


def _result_key(tool_name: Any, params: Mapping[str, Any]) -> str:
    # Listing and getting resources is per kind, so the kind tells results apart.
    if tool_name in ("resources_list", "resources_get") and "kind" in params:
        return f"{tool_name}_{params['kind']}_result"
    return f"{tool_name}_result"


def _format_server_data(server_data: Any) -> str:
    text = ""
    if isinstance(server_data, list):
        for item in server_data:
            result_key = _result_key(item.get("tool", "unknown_tool"), item.get("parameters", {}))
            if "result" in item:
                result = item["result"]
                if result:
                    formatted = _truncated(format_data({"result": result}))
                    text += f"  - **{result_key}**:\n```\n{formatted}\n```\n"
            elif "error" in item:
                text += f"  - **{result_key}_error**: {item['error']}\n"
    elif isinstance(server_data, dict):
        for key, value in server_data.items():
            formatted = _truncated(format_data(value))
            text += f"  - **{key}**:\n```\n{formatted}\n```\n"
    else:
        formatted = _truncated(format_data(server_data))
        text += f"```\n{formatted}\n```\n"
    return text


def format_iteration_history(iteration_history: Sequence[Mapping[str, Any]]) -> str:
    """_format_iteration_history: tools called, results (each cut at 3,000 characters),
    partial analysis, per iteration."""
    if not iteration_history:
        return NO_ITERATIONS
    history_text = ""
    for number, iteration in enumerate(iteration_history, 1):
        history_text += f"### Iteration {number}\n"

        if iteration.get("tools_called"):
            history_text += "**Tools Called:**\n"
            for tool in iteration["tools_called"]:
                history_text += (
                    f"- {tool.get('server', 'unknown')}.{tool.get('tool', 'unknown')}: "
                    f"{tool.get('reason', 'No reason provided')}\n"
                )
            history_text += "\n"

        if iteration.get("mcp_data"):
            history_text += "**Results:**\n"
            for server_name, server_data in iteration["mcp_data"].items():
                data_count = len(server_data) if isinstance(server_data, list) else 1
                history_text += f"- **{server_name}**: {data_count} data points collected\n"
                history_text += _format_server_data(server_data)
            history_text += "\n"

        if "partial_analysis" in iteration:
            history_text += f"**Partial Analysis:**\n{iteration['partial_analysis']}\n\n"

        history_text += "---\n\n"
    return history_text.strip()
