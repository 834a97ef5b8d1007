"""Cache breakpoints (CONTRACT.md §11.1): the claim is a promise, and not needlessly short.

Sessions of every kind grow between two renders (more stage events, investigation
events, history exchanges, a longer chain context, more ReAct lines or iterations; the
kinds with nothing that grows are rendered again as they are), with and without a
budget, under either policy. Every breakpoint of the first render must hold in the
second unless the second cuts differently, and then still those up to the earlier of
the two renders' cut points (`meta.cache.cut`, where each departs from its job's whole
prompt); its token figures must be the tokenizer's own count of the prefix; and, when
everything that can grow did grow, the last breakpoint must sit where the two renders
really part, give or take the framing they happen to share.
"""

import copy
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from tests.data import CONFORMANCE, read_jsonl
from worker.render.budget import tokenizers
from worker.render.cache import cache_meta, estimate_cache_meta
from worker.render.renderer import Renderer

Messages = list[dict[str, str]]

# Characters the two renders may share past the last breakpoint by coincidence: the
# framing a new item and the text after the old last one begin with alike ("\n\n", "**").
FRAMING_SLACK = 120


def base_jobs() -> dict[str, dict[str, Any]]:
    """The first conformance job of each kind, and a system_prompt job."""
    jobs: dict[str, dict[str, Any]] = {}
    for name in ("cases.jsonl", "families.jsonl"):
        for case in read_jsonl(CONFORMANCE / name):
            jobs.setdefault(case["job"]["kind"], case["job"])
    jobs["system_prompt"] = {
        "job_id": "sp",
        "kind": "system_prompt",
        "system_prompt": {"context_tokens": 8192},
    }
    return jobs


BASE = base_jobs()


def test_the_growing_sessions_cover_every_kind() -> None:
    from schemas.job import Kind

    assert set(BASE) == {kind.value for kind in Kind}


def words(n: int, size: int) -> str:
    return f"item {n}: " + " ".join(f"pod-{(n * 7 + i) % 13} OOMKilled" for i in range(size))


def stage_events(count: int, size: int) -> list[dict[str, str]]:
    types = ["tool_call", "tool_result", "llm_thinking", "final_analysis"]
    return [
        {"event_type": types[n % len(types)], "content": words(n, size + n % 5)}
        for n in range(count)
    ]


def exchanges(count: int, size: int) -> list[dict[str, Any]]:
    return [
        {
            "user_question": f"question {n}?",
            "messages": [{"role": "assistant", "content": words(n, size)}],
        }
        for n in range(count)
    ]


def stages_text(count: int, size: int) -> str:
    return "".join(f"## Stage {n}\n{words(n, size)}\n\n" for n in range(count))


# The shapes of growing session: (kind, how a job of `n` items of `size` words looks).
def grown(shape: str, n: int, size: int) -> dict[str, Any]:
    kind = shape.split(":")[0]
    job = copy.deepcopy(BASE[kind])
    job["job_id"] = f"grow-{shape}"
    if shape.endswith(":stage_events"):
        job["stage"].pop("previous_stage_context", None)
        job["stage"]["previous_stage_events"] = stage_events(n, size)
        job.pop("chat", None)
    elif shape.endswith(":stage_text"):
        job["stage"].pop("previous_stage_events", None)
        job["stage"]["previous_stage_context"] = stages_text(n, size) or None
        job.pop("chat", None)
    elif shape.endswith(":chat"):
        job["stage"].pop("previous_stage_events", None)
        job["stage"].pop("previous_stage_context", None)
        job["chat"] = {
            "user_question": "What now?",
            "investigation_events": stage_events(n, size),
            "history": exchanges(n // 2, size),
        }
    elif shape.endswith(":chat_no_history"):
        job["chat"] = {"user_question": "What now?", "investigation_events": stage_events(n, size)}
    elif kind.startswith("legacy_"):
        legacy = job["legacy"]
        if "previous_stage_context" in legacy or kind != "legacy_iterative_tool_selection":
            legacy["previous_stage_context"] = stages_text(n, size) or None
        if kind in ("legacy_react", "legacy_stage_react"):
            legacy["react_history"] = [f"Thought: {words(i, size)}" for i in range(n)]
        if kind == "legacy_iterative_tool_selection":
            legacy["iteration_history"] = [{"partial_analysis": words(i, size)} for i in range(n)]
    return job


SHAPES = [
    *(f"{kind}:stage_events" for kind in ("react", "native_thinking", "synthesis")),
    *(f"{kind}:stage_text" for kind in ("react", "synthesis")),
    *(
        f"{kind}:{chat}"
        for kind in ("react", "native_thinking")
        for chat in ("chat", "chat_no_history")
    ),
    *(kind for kind in BASE if kind.startswith("legacy_")),
    *(
        kind
        for kind in BASE
        if kind not in ("react", "native_thinking", "synthesis") and not kind.startswith("legacy_")
    ),
]


def render(renderer: Renderer, job: dict[str, Any]) -> dict[str, Any]:
    reply: dict[str, Any] = orjson.loads(renderer.render(orjson.dumps(job)).body)
    return reply


def count(tokenizer: str, text: str) -> int:
    if tokenizer == "estimate":
        return -(-len(text) // 4)
    exact = tokenizers.get(tokenizer)
    assert isinstance(exact, tokenizers.TiktokenTokenizer)
    return len(exact.encoding.encode_ordinary(text))


def shared_chars(a: Messages, b: Messages) -> int:
    """Characters of `a`, in message order, up to where `b` first differs from it."""
    shared = 0
    for x, y in zip(a, b, strict=False):
        if x == y:
            shared += len(x["content"])
            continue
        if x["role"] == y["role"]:
            same = x["content"]
            other = y["content"]
            shared += next(
                (i for i, (p, q) in enumerate(zip(same, other, strict=False)) if p != q),
                min(len(same), len(other)),
            )
        break
    return shared


def cuts(reply: dict[str, Any]) -> list[tuple[str, int, int]]:
    budget = reply["meta"].get("budget") or {"elisions": []}
    return [(e["section"], e["items"], e["chars"]) for e in budget["elisions"]]


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    shape=st.sampled_from(SHAPES),
    start=st.integers(min_value=0, max_value=10),
    more=st.integers(min_value=1, max_value=4),
    size=st.integers(min_value=1, max_value=60),
    tokenizer=st.sampled_from([None, "estimate", "cl100k_base", "o200k_base"]),
    percent=st.integers(min_value=25, max_value=150),
    policy=st.sampled_from(["cache", "tight"]),
)
def test_every_breakpoint_holds_on_the_next_render_and_is_not_needlessly_short(
    conformance_renderer: Renderer,
    shape: str,
    start: int,
    more: int,
    size: int,
    tokenizer: str | None,
    percent: int,
    policy: str,
) -> None:
    before_job, after_job = grown(shape, start, size), grown(shape, start + more, size)
    whole_before = render(conformance_renderer, before_job)
    if tokenizer is not None:
        full = render(conformance_renderer, after_job)
        assert full["status"] == "ok", full
        whole = sum(count(tokenizer, m["content"]) for m in full["messages"])
        budget = {
            "max_prompt_tokens": max(1, whole * percent // 100),
            "tokenizer": tokenizer,
            "policy": policy,
        }
        before_job["budget"] = after_job["budget"] = budget
    before, after = (
        render(conformance_renderer, before_job),
        render(conformance_renderer, after_job),
    )
    assume(before["status"] == "ok" and after["status"] == "ok")
    cache = before["meta"]["cache"]
    messages: Messages = before["messages"]
    name = tokenizer or "estimate"

    # The cut point is where the prompt departs from the job's whole prompt.
    cut = cache["cut"]
    assert (cut is None) == (cuts(before) == [])
    if cut is not None:
        i, chars = cut["message"], cut["chars"]
        whole_messages: Messages = whole_before["messages"]
        assert messages[:i] == whole_messages[:i]
        assert messages[i]["content"][:chars] == whole_messages[i]["content"][:chars]
        assert (
            messages[i]["content"][chars : chars + 1]
            != whole_messages[i]["content"][chars : chars + 1]
        )
        expected = sum(count(name, m["content"]) for m in messages[:i])
        assert cut["tokens"] == expected + count(name, messages[i]["content"][:chars])

    # The figures are the tokenizer's own counts.
    assert cache["tokenizer"] == name
    assert cache["prompt_tokens"] == sum(count(name, m["content"]) for m in messages)
    assert len(cache["breakpoints"]) <= 4
    for point in cache["breakpoints"]:
        i, chars = point["message"], point["chars"]
        expected = sum(count(name, m["content"]) for m in messages[:i])
        expected += count(name, messages[i]["content"][:chars])
        assert point["tokens"] == expected, point
    assert [(p["message"], p["chars"]) for p in cache["breakpoints"]] == sorted(
        (p["message"], p["chars"]) for p in cache["breakpoints"]
    )

    later: Messages = after["messages"]
    if cuts(before) != cuts(after):
        # A new cut: the prompt holds up to the earlier of the two cut points.
        bound = min(
            (c["message"], c["chars"])
            for c in (cache["cut"], after["meta"]["cache"]["cut"])
            if c is not None
        )
        kept = [p for p in cache["breakpoints"] if (p["message"], p["chars"]) <= bound]
        event(f"a new cut: {len(kept)} of {len(cache['breakpoints'])} breakpoints promised")
        for point in kept:
            i, chars = point["message"], point["chars"]
            assert later[:i] == messages[:i], (shape, point)
            assert later[i]["content"][:chars] == messages[i]["content"][:chars], (shape, point)
        return
    event("promise checked")
    for point in cache["breakpoints"]:
        i, chars = point["message"], point["chars"]
        assert later[:i] == messages[:i], (shape, point)
        assert later[i]["content"][:chars] == messages[i]["content"][:chars], (shape, point)

    # Not needlessly short: with everything grown, the last breakpoint is where the two
    # renders part, give or take shared framing.
    claimed = 0
    if cache["breakpoints"]:
        last = cache["breakpoints"][-1]
        claimed = sum(len(m["content"]) for m in messages[: last["message"]]) + last["chars"]
    real = shared_chars(messages, later)
    assert claimed <= real
    assert real - claimed <= FRAMING_SLACK, (shape, claimed, real)


def test_a_kind_where_nothing_grows_is_stable_to_its_last_character(
    conformance_renderer: Renderer,
) -> None:
    reply = render(conformance_renderer, BASE["executive_summary"])
    messages = reply["messages"]
    last = reply["meta"]["cache"]["breakpoints"][-1]
    assert (last["message"], last["chars"]) == (len(messages) - 1, len(messages[-1]["content"]))
    assert reply["meta"]["cache"]["stable_tokens"] == reply["meta"]["cache"]["prompt_tokens"]


def test_a_stage_breakpoint_ends_after_the_last_event(conformance_renderer: Renderer) -> None:
    job = grown("react:stage_events", 3, 5)
    reply = render(conformance_renderer, job)
    user = reply["messages"][1]["content"]
    last = reply["meta"]["cache"]["breakpoints"][-1]
    assert last["message"] == 1
    assert user[: last["chars"]].endswith(
        job["stage"]["previous_stage_events"][-1]["content"] + "\n\n"
    )
    assert user[last["chars"] :].startswith("<!-- STAGE_CONTEXT_END -->")
    # The system message's end is a breakpoint of its own.
    assert reply["meta"]["cache"]["breakpoints"][0] == {
        "message": 0,
        "chars": len(reply["messages"][0]["content"]),
        "tokens": -(-len(reply["messages"][0]["content"]) // 4),
    }


@pytest.mark.parametrize("tokenizer", ["cl100k_base", "o200k_base"])
def test_a_budgeted_reply_counts_its_breakpoints_by_the_budget_tokenizer(
    conformance_renderer: Renderer, tokenizer: str
) -> None:
    job = grown("react:stage_events", 40, 30)
    job["budget"] = {"max_prompt_tokens": 3000, "tokenizer": tokenizer}
    reply = render(conformance_renderer, job)
    assert reply["meta"]["budget"]["trimmed"]
    cache = reply["meta"]["cache"]
    assert cache["tokenizer"] == tokenizer
    assert cache["prompt_tokens"] == reply["meta"]["budget"]["prompt_tokens"]
    assert 0 < cache["stable_tokens"] < cache["prompt_tokens"]


@settings(max_examples=500, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=50), max_size=7),
    stable=st.one_of(
        st.none(),
        st.tuples(st.integers(min_value=0, max_value=8), st.integers(min_value=0, max_value=60)),
    ),
)
def test_the_estimate_shortcut_is_the_general_computation(
    sizes: list[int], stable: tuple[int, int] | None
) -> None:
    messages = [{"role": "user", "content": "x" * size} for size in sizes]
    assert estimate_cache_meta(messages, stable) == cache_meta(messages, stable)
