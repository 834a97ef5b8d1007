"""Shared pieces of the masking tests: the corpora (YAML files beside this module) and
the input positions of a job where outside-world text goes."""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

CORPUS = Path(__file__).parent

JobFactory = Callable[[str], dict[str, Any]]


def load_corpus(name: str) -> list[dict[str, Any]]:
    with (CORPUS / name).open(encoding="utf-8") as handle:
        cases: list[dict[str, Any]] = yaml.safe_load(handle)
    return cases


SECRET_CASES = load_corpus("secrets.yaml")
BENIGN_CASES = load_corpus("benign.yaml")


@dataclass(frozen=True)
class Position:
    """One place of a job where outside-world text goes, and how to put text there."""

    field: str  # the masking field path it exercises (worker/masking/fields.py)
    name: str
    job: JobFactory
    # The builder copies the text as it is (so strings around a secret can be checked);
    # false where it re-encodes it (JSON dumps) or truncates it.
    verbatim: bool = True


def _job(kind: str, **payload: Any) -> dict[str, Any]:
    return {"job_id": "masking-test", "kind": kind, **payload}


def _legacy(kind: str, **fields: Any) -> dict[str, Any]:
    legacy = {"alert_data": {"alert_type": "PodCrashLoopBackOff"}, **fields}
    return _job(kind, legacy=legacy)


def _mcp(field: str, text: str) -> dict[str, Any]:
    return _job("mcp_summarization", mcp_summarization={"max_summary_tokens": 500, field: text})


def _history_message(role: str) -> JobFactory:
    def job(text: str) -> dict[str, Any]:
        exchange = {"user_question": "What failed?", "messages": [{"role": role, "content": text}]}
        return _job("react", chat={"user_question": "And now?", "history": [exchange]})

    return job


POSITIONS: tuple[Position, ...] = (
    Position("session.alert_data", "react", lambda t: _job("react", session={"alert_data": t})),
    Position(
        "session.runbook_content",
        "native_thinking",
        lambda t: _job("native_thinking", session={"runbook_content": t}),
    ),
    Position(
        "stage.previous_stage_context",
        "synthesis",
        lambda t: _job("synthesis", stage={"previous_stage_context": t}),
    ),
    Position(
        "stage.previous_stage_events[].content",
        "react",
        lambda t: _job(
            "react",
            stage={
                "previous_stage_events": [
                    {"event_type": "llm_response", "content": "Checked the pod."},
                    {"event_type": "tool_result", "content": t},
                ]
            },
        ),
    ),
    Position(
        "stage.previous_attempt.error_message",
        "react",
        lambda t: _job(
            "react", stage={"previous_attempt": {"attempt_number": 2, "error_message": t}}
        ),
    ),
    Position(
        "stage.previous_attempt.previous_output",
        "synthesis",
        lambda t: _job(
            "synthesis", stage={"previous_attempt": {"attempt_number": 1, "previous_output": t}}
        ),
    ),
    Position("chat.user_question", "react", lambda t: _job("react", chat={"user_question": t})),
    Position(
        "chat.investigation_context",
        "native_thinking",
        lambda t: _job(
            "native_thinking", chat={"user_question": "Why?", "investigation_context": t}
        ),
    ),
    Position(
        "chat.investigation_events[].content",
        "react",
        lambda t: _job(
            "react",
            chat={
                "user_question": "Why?",
                "investigation_events": [{"event_type": "tool_result", "content": t}],
            },
        ),
    ),
    Position(
        "chat.history[].user_question",
        "react",
        lambda t: _job(
            "react",
            chat={"user_question": "And now?", "history": [{"user_question": t, "messages": []}]},
        ),
    ),
    *(
        Position("chat.history[].messages[].content", role, _history_message(role))
        for role in ("assistant", "user", "tool")
    ),
    Position(
        "mcp_summarization.conversation_context",
        "mcp_summarization",
        lambda t: _mcp("conversation_context", t),
    ),
    Position(
        "mcp_summarization.result_text",
        "mcp_summarization",
        lambda t: _mcp("result_text", t),
    ),
    Position(
        "executive_summary.final_analysis",
        "executive_summary",
        lambda t: _job("executive_summary", executive_summary={"final_analysis": t}),
    ),
    Position(
        "legacy.alert_data",
        "top-level value",
        lambda t: _legacy("legacy_react", alert_data={"alert_type": "X", "details": t}),
        # A value starting with "{" is re-indented by the seed's json.dumps.
        verbatim=False,
    ),
    Position(
        "legacy.alert_data",
        "nested value",
        lambda t: _legacy(
            "legacy_final_analysis",
            alert_data={"alert_type": "X", "labels": {"app": "payments", "note": t}, "n": 3},
        ),
        verbatim=False,
    ),
    Position(
        "legacy.alert_data",
        "list item",
        lambda t: _legacy("legacy_tool_selection", alert_data={"events": ["started", t]}),
        verbatim=False,
    ),
    Position(
        "legacy.runbook_content",
        "legacy_stage_react",
        lambda t: _legacy("legacy_stage_react", runbook_content=t),
    ),
    Position(
        "legacy.previous_stage_context",
        "legacy_react",
        lambda t: _legacy("legacy_react", previous_stage_context=t),
    ),
    Position(
        "legacy.react_history",
        "line",
        lambda t: _legacy("legacy_react", react_history=["Thought: look at the pod", t]),
    ),
    Position(
        "legacy.react_history",
        "list of lines",
        lambda t: _legacy("legacy_stage_react", react_history=[["Action: get", t]]),
    ),
    Position(
        "legacy.iteration_history",
        "tool result",
        lambda t: _legacy(
            "legacy_iterative_tool_selection",
            iteration_history=[
                {"mcp_data": {"kubernetes": [{"tool": "resources_get", "result": t}]}}
            ],
        ),
        verbatim=False,  # JSON-encoded, cut at 3,000 characters
    ),
    Position(
        "legacy.iteration_history",
        "tool error",
        lambda t: _legacy(
            "legacy_iterative_tool_selection",
            iteration_history=[{"mcp_data": {"kubernetes": [{"tool": "pods_log", "error": t}]}}],
        ),
    ),
    Position(
        "legacy.iteration_history",
        "partial analysis",
        lambda t: _legacy(
            "legacy_iterative_tool_selection", iteration_history=[{"partial_analysis": t}]
        ),
    ),
    Position(
        "skill_error_observation.error",
        "skill_error_observation",
        lambda t: _job(
            "skill_error_observation",
            skill_error_observation={"tool_name": "bash", "error": t, "retry_count": 1},
        ),
    ),
)


def position_id(position: Position) -> str:
    return f"{position.field}[{position.name}]"
