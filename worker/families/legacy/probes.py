"""Probe jobs for the template version: together they reach every branch of the builder.

Hashing their renderings besides the template constants means that text written inline
in the seed's code (a `**Tools Called:**` heading, the `N/A` of a null alert value)
moves the version when it changes, like any template does.
"""

from typing import Any

_ALERT: dict[str, Any] = {
    "alert_type": "t",
    "object": {"k": 1},
    "array": [1],
    "json_text": "[1]",
    "not_json": "{x",
    "lines": "a\nb",
    "null": None,
    "flag": True,
}

_TOOLS: list[dict[str, Any]] = [
    {
        "server": "s",
        "name": "n",
        "description": "d",
        "input_schema": {"properties": {"p": {"description": "pd"}, "q": {}}},
    },
    {"tool": "t"},
]

_ITERATIONS: list[dict[str, Any]] = [
    {
        "tools_called": [{"server": "s", "tool": "t", "reason": "r"}, {}],
        "mcp_data": {
            "calls": [
                {"tool": "resources_list", "parameters": {"kind": "Pod"}, "result": "x" * 3001},
                {"tool": "t", "error": "e"},
                {},
            ],
            "mapping": {"k": "v"},
            "scalar": "v",
        },
        "partial_analysis": "a",
    }
]

_FULL: dict[str, Any] = {
    "alert_data": _ALERT,
    "runbook_content": "r",
    "previous_stage_context": "c",
    "tools": _TOOLS,
    "react_history": ["h", ["h1", "h2"]],
    "stage_name": "s",
    "is_final_stage": True,
    "previous_stages": ["p"],
    "agent_name": "a",
    "mcp_servers": ["probe"],
    "custom_instructions": "i",
    "server_guidance": "g",
    "iteration_history": _ITERATIONS,
}

_EMPTY: dict[str, Any] = {"alert_data": {}}

PROBE_JOBS: list[dict[str, Any]] = [
    {"kind": kind, "legacy": legacy}
    for kind in (
        "legacy_react",
        "legacy_stage_react",
        "legacy_final_analysis",
        "legacy_tool_selection",
        "legacy_iterative_tool_selection",
    )
    for legacy in (_FULL, _EMPTY)
]
