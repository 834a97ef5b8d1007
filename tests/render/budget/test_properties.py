"""Property tests of budgets over random sessions and budgets (CONTRACT.md §11)."""

from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.render.budget.jobs import estimate, render
from worker.families.tarsy.chat import format_current_task
from worker.families.tarsy.templates import ANALYSIS_TASK, SYNTHESIS_TASK
from worker.render.budget import tokenizers
from worker.render.renderer import Renderer

TYPES = [
    "tool_result",
    "tool_call",
    "llm_thinking",
    "llm_response",
    "final_analysis",
    "executive_summary",
    "custom_note",
]
# Outside texts from empty to a few thousand characters: a phrase said n times.
texts = st.builds(
    lambda phrase, times: phrase * times,
    st.text(alphabet=st.sampled_from('abc xyz\n✅漢-:{}"0123456789'), min_size=1, max_size=40),
    st.integers(min_value=0, max_value=80),
)
events = st.lists(
    st.fixed_dictionaries({"event_type": st.sampled_from(TYPES), "content": texts}),
    min_size=0,
    max_size=25,
)
history = st.lists(
    st.fixed_dictionaries(
        {
            "user_question": texts,
            "messages": st.lists(
                st.fixed_dictionaries(
                    {"role": st.sampled_from(["assistant", "user", "tool"]), "content": texts}
                ),
                max_size=3,
            ),
        }
    ),
    max_size=8,
)
TOOLS = [{"name": "k8s.get_pods", "description": "List pods."}]


@st.composite
def jobs(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["react", "native_thinking", "synthesis"]))
    job: dict[str, Any] = {
        "job_id": "prop",
        "kind": kind,
        "session": {"alert_data": draw(texts), "runbook_content": draw(texts)},
        "stage": {"custom_instructions": "CUSTOM-INSTRUCTIONS-KEPT"},
        "tools": TOOLS,
    }
    if kind != "synthesis" and draw(st.booleans()):
        job["chat"] = {
            "user_question": "QUESTION-KEPT " + draw(texts),
            "investigation_events": draw(events),
            "history": draw(history),
        }
    else:
        job["stage"]["previous_stage_events"] = draw(events)
    return job


def _bare(job: dict[str, Any]) -> dict[str, Any]:
    bare = {**job, "session": {}, "stage": {"custom_instructions": "CUSTOM-INSTRUCTIONS-KEPT"}}
    if "chat" in job:
        bare["chat"] = {"user_question": job["chat"]["user_question"]}
    return bare


def _last_item(job: dict[str, Any]) -> tuple[str, str] | None:
    """(section, text) of the most recent event or exchange answer, if any."""
    if "chat" in job:
        exchanges = job["chat"]["history"]
        if exchanges and exchanges[-1]["messages"]:
            return f"chat.history[{len(exchanges) - 1}]", exchanges[-1]["messages"][-1]["content"]
        return None
    items = job["stage"]["previous_stage_events"]
    if items:
        return f"stage.previous_stage_events[{len(items) - 1}]", items[-1]["content"]
    return None


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    job=jobs(),
    percent=st.integers(min_value=-5, max_value=110),
    exact=st.booleans(),
    policy=st.sampled_from(["cache", "tight"]),
)
def test_a_budgeted_reply_fits_or_says_over_budget(
    renderer: Renderer, job: dict[str, Any], percent: int, exact: bool, policy: str
) -> None:
    plain = render(renderer, job)
    tokenizer = tokenizers.get("cl100k_base" if exact else "estimate")
    full = sum(tokenizer.count(m["content"]) for m in plain["messages"])
    # Budgets around the span between the bare job (nothing cuttable) and the whole.
    bare = sum(tokenizer.count(m["content"]) for m in render(renderer, _bare(job))["messages"])
    limit = max(1, bare + int((full - bare) * percent / 100))
    budget = {"max_prompt_tokens": limit, "tokenizer": tokenizer.name, "policy": policy}
    budgeted = {**job, "budget": budget}
    reply = render(renderer, budgeted)

    # Deterministic: the same job gives the same reply.
    again = render(renderer, budgeted)
    assert again.get("messages") == reply.get("messages")
    assert again.get("error") == reply.get("error")

    event(
        reply["status"]
        if reply["status"] == "error"
        else f"trimmed={reply['meta']['budget']['trimmed']}"
    )
    if reply["status"] == "error":
        assert reply["error"]["code"] == "over_budget"
        [detail] = reply["error"]["details"]
        assert detail["required"] > detail["allowed"] == limit
        return
    messages = reply["messages"]
    budget = reply["meta"]["budget"]
    size = sum(tokenizer.count(m["content"]) for m in messages)
    assert size <= limit
    if budget["counted"]:
        assert budget["prompt_tokens"] == size
    if full <= limit:
        assert messages == plain["messages"]
        assert not budget["trimmed"]
        return
    assert budget["trimmed"]

    # Never cut: the system message, the tools, the task, the question.
    assert messages[0] == plain["messages"][0]
    user = messages[1]["content"]
    plain_user = plain["messages"][1]["content"]
    if job["kind"] == "react":
        assert user.startswith(plain_user[: plain_user.index("k8s.get_pods")])
        assert "List pods." in user
    if "chat" in job:
        assert user.endswith(format_current_task(job["chat"]["user_question"]))
    else:
        task = ANALYSIS_TASK if job["kind"] != "synthesis" else SYNTHESIS_TASK
        assert user.endswith(task)

    # The most recent event or exchange is kept: whole, or shortened in its middle.
    last = _last_item(job)
    if last is not None:
        section, text = last
        shortened = any(e["section"] == section for e in budget["elisions"])
        assert shortened or text in user


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(job=jobs())
def test_a_budget_the_prompt_fits_changes_nothing(renderer: Renderer, job: dict[str, Any]) -> None:
    plain = render(renderer, job)
    size = estimate(plain["messages"])
    for limit in (size, size + 1, 10 * size + 1000):
        reply = render(renderer, {**job, "budget": {"max_prompt_tokens": limit}})
        assert reply["messages"] == plain["messages"]
        assert reply["meta"]["budget"]["prompt_tokens"] == size
