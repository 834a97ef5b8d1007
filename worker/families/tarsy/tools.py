"""Tool descriptions for ReAct prompts (seed `tools.go`, with deviation D1).

D1 (CONTRACT.md §5): `default:` renders a string as-is and anything else as compact JSON;
`choices:` renders every value as compact JSON. Compact JSON is Python's `json.dumps`
with `separators=(",", ":")`, `sort_keys=True`, `ensure_ascii=False`, which is the
definition the conformance vectors were made with (orjson formats floats differently).
"""

import json
from collections.abc import Sequence
from typing import Any

from schemas.job import Tool
from worker.families.base import NO_TOOL_TEXTS, ToolTexts

_ENCODER = json.JSONEncoder(separators=(",", ":"), sort_keys=True, ensure_ascii=False)
# The C string encoder `json` itself uses for ensure_ascii=False.
_encode_str = json.encoder.encode_basestring


def compact_json(value: Any) -> str:
    # Scalars are nearly all hint values; encoding them directly avoids the encoder's
    # per-call set-up, which dominated tool formatting. Output is identical to json.dumps.
    if isinstance(value, str):
        return _encode_str(value)
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if type(value) is int:
        return int.__repr__(value)
    return _ENCODER.encode(value)


def extract_parameters(schema: dict[str, Any] | None) -> list[str]:
    """One line per property, sorted by name, as the seed's `extractParameters`."""
    if not schema:
        return []
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return []
    required_list = schema.get("required")
    required = (
        {r for r in required_list if isinstance(r, str)}
        if isinstance(required_list, list)
        else set()
    )
    params = []
    # Sorted for deterministic output (the seed's Q8 decision); code-point order equals
    # Go's byte order for UTF-8 strings.
    for name in sorted(properties):
        prop = properties[name]
        if not isinstance(prop, dict):
            continue
        line = name + (" (required" if name in required else " (optional")
        prop_type = prop.get("type")
        if isinstance(prop_type, str):
            line += ", " + prop_type
        line += ")"
        description = prop.get("description")
        if isinstance(description, str) and description:
            line += ": " + description
        hints = []
        if "default" in prop:
            default = prop["default"]
            hints.append(
                "default: " + (default if isinstance(default, str) else compact_json(default))
            )
        enum = prop.get("enum")
        if isinstance(enum, list):
            hints.append("choices: [" + ", ".join(compact_json(v) for v in enum) + "]")
        if hints:
            line += " [" + "; ".join(hints) + "]"
        params.append(line)
    return params


def format_tool_block(tool: Tool) -> str:
    """A tool's description without its list number: `**name**: description` + parameters."""
    block = f"**{tool.name}**: {tool.description}\n"
    params = extract_parameters(tool.input_schema)
    if params:
        return block + "    **Parameters**:\n" + "".join(f"    - {p}\n" for p in params)
    return block + "    **Parameters**: None\n"


def format_tool_descriptions(tools: Sequence[Tool], texts: ToolTexts = NO_TOOL_TEXTS) -> str:
    if not tools:
        return "No tools available."
    # Kept per catalogue (`texts`): producers send the same tool list job after job,
    # and turning schemas into text is the costly part.
    text = texts.text(tools)
    if text is None:
        # Blank line between tools, not after the last one.
        text = "\n".join(
            f"{index}. {format_tool_block(tool)}" for index, tool in enumerate(tools, start=1)
        )
        texts.remember_text(tools, text)
    return text


def available_tools_preamble(tools: Sequence[Tool], texts: ToolTexts = NO_TOOL_TEXTS) -> str:
    """The ReAct tool section that opens investigation and chat user messages."""
    if not tools:
        return ""
    return (
        "Answer the following question using the available tools.\n\n"
        f"Available tools:\n\n{format_tool_descriptions(tools, texts)}\n\n"
    )
