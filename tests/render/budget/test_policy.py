"""The budget's policy (CONTRACT.md §11 "Policy"): `"cache"` keeps a growing session's
cached prefix across its calls; `"tight"` trims as the worker always did.

The sessions are generated (sessions.py): chats with and without history, a chat whose
history outgrows its budget, stages with previous-stage events (small and huge) or a
growing chain context, and the legacy family's growing ReAct history, iterations and
chain context; each grows one item a render under a budget of 25%, 45% and 70% of its
largest render. The figures are a caller's (sessions.figures).
"""

import itertools
import json
from typing import Any

import pytest

from tests.render.budget.sessions import (
    SHAPES,
    SHAPES_BY_NAME,
    SHARES,
    Figures,
    cuts,
    figures,
    render,
    rendered,
    repeats,
)
from tests.render.budget.tight_renders import PINNED, job_of, record
from worker.render.renderer import Renderer

# Sessions whose structure caps a figure below its target, whatever the policy (docs/
# BUDGETS.md, "Prompt caching"): (shape, share) -> (why, the least each capped figure
# must still be, a little under what it was measured at).
CAPPED: dict[tuple[str, float], tuple[str, dict[str, float]]] = {
    ("chat_growing_history", 0.45): (
        "the history's heading counts its exchanges, so every new exchange changes the "
        "prompt where the history begins, and here the history is 40% of it",
        {"prefix_stability": 0.58, "cached_share": 0.56},
    ),
    ("chat_growing_history", 0.70): (
        "as at 45%, with the history nearly 60% of the prompt",
        {"prefix_stability": 0.40, "cached_share": 0.38},
    ),
    **{
        ("legacy_react_history", share): (
            "seed 001 puts the ReAct history after the chain context, which may grow too: "
            "the promise (CONTRACT.md §11.1) ends at the chain context",
            {"cached_share": 0.15},
        )
        for share in SHARES
    },
    ("stage_huge_events", 0.25): (
        "each render adds 4-10k tokens, ~9% of the budget, and the prompt may grow by half "
        "the budget at most between cuts: a new cut every 5-6 renders at the least",
        {"prefix_stability": 0.76, "cached_share": 0.69},
    ),
}
TARGETS = {"prefix_stability": 0.9, "cached_share": 0.85}


def _figures(renderer: Renderer, shape: str, share: float, tokenizer: str) -> Figures:
    replies, limit = rendered(renderer, SHAPES_BY_NAME[shape], share, tokenizer)
    for reply in replies:
        assert reply["status"] == "ok", reply
        budget = reply["meta"]["budget"]
        # meta.cache counts exactly; meta.budget too unless the size alone proved the fit.
        assert reply["meta"]["cache"]["prompt_tokens"] <= budget["prompt_tokens"] <= limit
        if budget["counted"]:
            assert reply["meta"]["cache"]["prompt_tokens"] == budget["prompt_tokens"]
    return figures(replies, limit)


@pytest.mark.parametrize("share", SHARES)
@pytest.mark.parametrize("shape", [shape.name for shape in SHAPES])
@pytest.mark.parametrize(
    "tokenizer",
    [
        "estimate",
        # Minutes of CPU, tokenizing each render's newest items: the full suite's.
        pytest.param("cl100k_base", marks=pytest.mark.slow),
    ],
)
def test_a_growing_session_keeps_its_cached_prefix_and_uses_its_budget(
    renderer: Renderer, shape: str, share: float, tokenizer: str
) -> None:
    found = _figures(renderer, shape, share, tokenizer)
    assert found.trimmed > 0, "the session outgrows its budget"
    assert found.broken_breakpoints == 0
    assert found.max_budget_use <= 1
    assert found.mean_budget_use >= 0.75, found
    if found.min_budget_use_at_a_new_cut is not None:
        assert found.min_budget_use_at_a_new_cut >= 0.5, found
    why, floors = CAPPED.get((shape, share), ("", {}))
    for name, target in TARGETS.items():
        assert getattr(found, name) >= floors.get(name, target), (name, why, found)


def test_tight_trims_as_the_worker_did_before_budgets_had_a_policy(renderer: Renderer) -> None:
    """The pinned renders (tight_renders.py) were made by the code before this policy."""
    pinned = [json.loads(line) for line in PINNED.read_text(encoding="utf-8").splitlines()]
    assert len(pinned) > 500
    assert {case["shape"] for case in pinned} == {shape.name for shape in SHAPES}
    for case in pinned:
        shape = SHAPES_BY_NAME[case["shape"]]
        body = job_of(shape, case["items"], case["limit"], case["tokenizer"], "tight")
        reply = json.loads(renderer.render(body).body)
        expected = {k: v for k, v in case.items() if k not in ("shape", "items", "limit")}
        expected.pop("tokenizer")
        assert record(reply) == expected, case


def test_cache_is_the_default(renderer: Renderer) -> None:
    shape = SHAPES_BY_NAME["stage_events"]
    job = shape.job(120)
    limit = 12_000
    plain = render(renderer, {"budget": {"max_prompt_tokens": limit}, **job})
    cache = render(renderer, {"budget": {"max_prompt_tokens": limit, "policy": "cache"}, **job})
    tight = render(renderer, {"budget": {"max_prompt_tokens": limit, "policy": "tight"}, **job})
    assert plain["messages"] == cache["messages"] != tight["messages"]
    # A step goes at once: more is left out than the tightest fit needs.
    assert cuts(cache)[0][1] > cuts(tight)[0][1]


@pytest.mark.parametrize("policy", ["fast", "", "CACHE", None, 1, ["cache"]])
def test_any_other_policy_is_an_invalid_job(renderer: Renderer, policy: Any) -> None:
    job = {
        "job_id": "p",
        "kind": "executive_summary",
        "executive_summary": {"final_analysis": "The pod ran out of memory."},
        "budget": {"max_prompt_tokens": 1000, "policy": policy},
    }
    reply = render(renderer, job)
    assert reply["status"] == "error"
    assert reply["error"]["code"] == "invalid_job"
    [detail] = reply["error"]["details"]
    assert detail["field"] == "budget.policy"
    assert "cache" in detail["message"] and "tight" in detail["message"]


def test_a_chat_whose_history_outgrows_its_budget_keeps_what_precedes_the_history(
    renderer: Renderer,
) -> None:
    """The history is cut anew on almost every render, the investigation before it is
    not: the breakpoint before the history holds across the history's new cuts."""
    replies, _ = rendered(renderer, SHAPES_BY_NAME["chat_growing_history"], 0.70, "cl100k_base")
    history_cuts = 0
    for before, after in itertools.pairwise(replies):
        if cuts(before) == cuts(after):
            continue
        assert {section for section, _, _ in cuts(before)} <= {"chat.history"}
        history_cuts += 1
        last = before["meta"]["cache"]["breakpoints"][-1]
        assert last["message"] == 1
        user = before["messages"][1]["content"]
        assert "💬 CHAT HISTORY" in user[last["chars"] :]
        assert "💬 CHAT HISTORY" not in user[: last["chars"]]
        assert repeats(before["messages"], after["messages"], last["message"], last["chars"])
    assert history_cuts > 0
