"""The budget field end to end through the renderer: fits, trims, refuses (CONTRACT.md §11)."""

import json
from typing import Any

import pytest

from tests.data import CONFORMANCE, read_jsonl
from tests.render.budget.jobs import chat, estimate, event, investigation, render, without_budget
from tests.render.conformance_helpers import assert_same_messages
from worker.render.budget.markers import items_left_out
from worker.render.renderer import Renderer

CASES = [
    *read_jsonl(CONFORMANCE / "cases.jsonl"),
    *read_jsonl(CONFORMANCE / "families.jsonl"),
]


@pytest.mark.parametrize("tokenizer", ["estimate", "cl100k_base"])
def test_every_conformance_case_is_unchanged_under_a_budget_it_fits(
    conformance_renderer: Renderer, tokenizer: str
) -> None:
    for case in CASES:
        expected = case["expected_messages"]
        # The smallest budget the case fits in by the estimate; cl100k_base never counts
        # more tokens than UTF-8 bytes, so four times that is enough for it.
        needed = estimate(expected) * (1 if tokenizer == "estimate" else 4)
        job = {**case["job"], "budget": {"max_prompt_tokens": needed, "tokenizer": tokenizer}}
        reply = render(conformance_renderer, job)
        assert reply["status"] == "ok", (case["job"]["job_id"], reply)
        assert_same_messages(reply["messages"], expected)
        assert reply["meta"]["budget"]["trimmed"] is False
        assert reply["meta"]["budget"]["elisions"] == []


def test_a_job_that_fits_exactly_is_untouched_and_counted(renderer: Renderer) -> None:
    plain = render(renderer, investigation(30))
    size = estimate(plain["messages"])
    reply = render(renderer, investigation(30, max_prompt_tokens=size))
    assert reply["messages"] == plain["messages"]
    assert reply["meta"]["budget"] == {
        "max_prompt_tokens": size,
        "tokenizer": "estimate",
        "prompt_tokens": size,
        "counted": True,
        "trimmed": False,
        "elisions": [],
    }
    assert "budget" not in plain["meta"]


def test_one_token_less_leaves_out_the_oldest_events_behind_a_marker(renderer: Renderer) -> None:
    plain = render(renderer, investigation(30))
    size = estimate(plain["messages"])
    reply = render(renderer, investigation(30, max_prompt_tokens=size - 1))
    budget = reply["meta"]["budget"]
    assert reply["status"] == "ok"
    assert budget["trimmed"] is True
    assert budget["prompt_tokens"] == estimate(reply["messages"]) <= size - 1
    [elision] = budget["elisions"]
    assert elision["section"] == "stage.previous_stage_events"
    left_out = elision["items"]
    user = reply["messages"][1]["content"]
    # The oldest events are gone, the newer ones are all there, in order, after the marker.
    assert "event 0:" not in user
    assert f"event {left_out - 1}:" not in user
    positions = [user.index(f"event {n}:") for n in range(left_out, 30)]
    assert positions == sorted(positions)
    marker = items_left_out(left_out, "event", elision["chars"])
    assert f"### left out\n\n{marker}\n\n### Tool Result" in user
    assert user.index(marker) < positions[0]
    # Only the events' part of the message changed.
    before = plain["messages"][1]["content"]
    assert user.startswith(before[: before.index("### Tool Result")])
    assert user.endswith(before[before.index("<!-- STAGE_CONTEXT_END -->") :])
    assert reply["messages"][0] == plain["messages"][0]


def test_conclusions_are_cut_after_every_other_event(renderer: Renderer) -> None:
    job = investigation(0)
    events = [event(n) for n in range(40)]
    events[3] = {"event_type": "final_analysis", "content": "CONCLUSION-A " * 30}
    events[20] = {"event_type": "executive_summary", "content": "CONCLUSION-B " * 30}
    job["stage"]["previous_stage_events"] = events
    full = estimate(render(renderer, job)["messages"])
    reply = render(renderer, {**job, "budget": {"max_prompt_tokens": full * 2 // 3}})
    user = reply["messages"][1]["content"]
    assert reply["meta"]["budget"]["trimmed"]
    assert "event 3:" not in user and "event 20:" not in user
    assert "CONCLUSION-A" in user and "CONCLUSION-B" in user
    assert "event 39:" in user


def test_chat_history_goes_before_investigation_events(renderer: Renderer) -> None:
    job = chat(exchanges=12, events=12)
    full = estimate(render(renderer, job)["messages"])
    reply = render(renderer, {**job, "budget": {"max_prompt_tokens": full - 500}})
    [elision] = reply["meta"]["budget"]["elisions"]
    assert elision["section"] == "chat.history"
    user = reply["messages"][1]["content"]
    assert "event 0:" in user  # no investigation event was cut
    assert "answer 11:" in user  # the most recent exchange is kept
    assert "Why did the api pod restart?" in user


def test_the_last_event_is_kept_and_shortened_in_its_middle(renderer: Renderer) -> None:
    job = investigation(0)
    last = "HEAD " + "x" * 40_000 + " TAIL"
    job["stage"]["previous_stage_events"] = [
        event(0),
        {"event_type": "tool_result", "content": last},
    ]
    reply = render(renderer, {**job, "budget": {"max_prompt_tokens": 4000}})
    assert reply["status"] == "ok"
    budget = reply["meta"]["budget"]
    assert budget["prompt_tokens"] <= 4000
    sections = [e["section"] for e in budget["elisions"]]
    assert sections[0] == "stage.previous_stage_events"
    assert "stage.previous_stage_events[1]" in sections
    user = reply["messages"][1]["content"]
    assert "HEAD xxx" in user and "xxx TAIL" in user
    assert "left out of the middle to fit the context window" in user
    assert "Never restart the database." in reply["messages"][0]["content"]


def test_what_may_never_be_cut_over_the_budget_is_an_over_budget_error(
    renderer: Renderer,
) -> None:
    reply = render(renderer, investigation(5, max_prompt_tokens=50))
    assert reply["status"] == "error"
    error = reply["error"]
    assert error["code"] == "over_budget"
    [detail] = error["details"]
    assert detail["allowed"] == 50
    # What is left is at least the system message and the tools: far more than 50.
    system = render(renderer, investigation(5))["messages"][0]["content"]
    assert detail["required"] >= len(system) // 4 > 50


@pytest.mark.parametrize(
    ("budget", "field", "error_type"),
    [
        ("16000", "budget", "model_type"),
        ([16000], "budget", "model_type"),
        ({}, "budget.max_prompt_tokens", "missing"),
        ({"max_prompt_tokens": 0}, "budget.max_prompt_tokens", "greater_than"),
        ({"max_prompt_tokens": -5}, "budget.max_prompt_tokens", "greater_than"),
        ({"max_prompt_tokens": 1.5}, "budget.max_prompt_tokens", "int_type"),
        ({"max_prompt_tokens": 16000.0}, "budget.max_prompt_tokens", "int_type"),
        ({"max_prompt_tokens": "16000"}, "budget.max_prompt_tokens", "int_type"),
        ({"max_prompt_tokens": True}, "budget.max_prompt_tokens", "int_type"),
        ({"max_prompt_tokens": 9, "tokenizer": ""}, "budget.tokenizer", "string_too_short"),
        ({"max_prompt_tokens": 9, "tokenizer": 3}, "budget.tokenizer", "string_type"),
    ],
)
def test_bad_budgets_are_invalid_jobs_naming_the_field(
    renderer: Renderer, budget: Any, field: str, error_type: str
) -> None:
    reply = render(renderer, {**investigation(1), "budget": budget})
    assert reply["status"] == "error"
    assert reply["error"]["code"] == "invalid_job"
    assert {"field": field, "type": error_type} in [
        {"field": d["field"], "type": d["type"]} for d in reply["error"]["details"]
    ], json.dumps(reply["error"])


def test_an_unavailable_tokenizer_is_an_invalid_job_naming_the_available_ones(
    renderer: Renderer,
) -> None:
    reply = render(renderer, investigation(1, max_prompt_tokens=100, tokenizer="p50k_base"))
    assert reply["error"]["code"] == "invalid_job"
    [detail] = reply["error"]["details"]
    assert detail["field"] == "budget.tokenizer"
    assert "'p50k_base' is not available" in detail["message"]
    assert "estimate, cl100k_base" in detail["message"]


def test_a_budget_changes_nothing_for_a_job_without_one(renderer: Renderer) -> None:
    job = investigation(3)
    assert render(renderer, job)["messages"] == render(renderer, without_budget(job))["messages"]


@pytest.mark.parametrize(
    "job",
    [
        {
            "kind": "mcp_summarization",
            "mcp_summarization": {"max_summary_tokens": 100, "result_text": "R" * 30_000},
        },
        {"kind": "executive_summary", "executive_summary": {"final_analysis": "F" * 30_000}},
        {
            "kind": "skill_error_observation",
            "skill_error_observation": {"tool_name": "t", "error": "E" * 30_000},
        },
        {
            "kind": "legacy_react",
            "legacy": {
                "alert_data": {"a": 1},
                "react_history": [f"line {n} " * 40 for n in range(200)],
            },
        },
        {
            "kind": "legacy_iterative_tool_selection",
            "legacy": {
                "alert_data": {"a": 1},
                "iteration_history": [
                    {"partial_analysis": f"analysis {n} " * 40} for n in range(100)
                ],
            },
        },
    ],
    ids=lambda job: job["kind"],
)
def test_every_family_with_outside_text_trims_to_fit(
    renderer: Renderer, job: dict[str, Any]
) -> None:
    job = {"job_id": "family", **job}
    plain = render(renderer, job)
    limit = estimate(plain["messages"]) // 3
    reply = render(renderer, {**job, "budget": {"max_prompt_tokens": limit}})
    assert reply["status"] == "ok", reply
    assert reply["meta"]["budget"]["trimmed"]
    assert estimate(reply["messages"]) == reply["meta"]["budget"]["prompt_tokens"] <= limit
    systems = [m for m in reply["messages"] if m["role"] == "system"]
    assert systems == [m for m in plain["messages"] if m["role"] == "system"]


def test_a_system_prompt_job_fits_whole_or_not_at_all(renderer: Renderer) -> None:
    job = {"job_id": "sp", "kind": "system_prompt", "system_prompt": {"context_tokens": 8192}}
    plain = render(renderer, job)
    size = estimate(plain["messages"])
    fits = render(renderer, {**job, "budget": {"max_prompt_tokens": size}})
    assert fits["messages"] == plain["messages"]
    refused = render(renderer, {**job, "budget": {"max_prompt_tokens": size - 1}})
    assert refused["error"]["code"] == "over_budget"
    assert refused["error"]["details"][0]["required"] == size
