"""Property tests: no input makes the renderer raise; every input gets a reply."""

import json
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.job import KIND_ALIASES, Kind
from worker.commands.render_input import iter_jobs
from worker.render.renderer import Renderer

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)

# Every kind of every family, plus TARSy's spellings.
KINDS = [kind.value for kind in Kind] + list(KIND_ALIASES)

# Job-shaped values reach deeper than arbitrary JSON does: known keys with arbitrary values.
job_like = st.fixed_dictionaries(
    {
        "job_id": st.one_of(st.text(max_size=5), json_values),
        "kind": st.one_of(st.sampled_from(KINDS), json_values),
    },
    optional={
        "session": st.one_of(
            st.fixed_dictionaries(
                {}, optional={"alert_data": st.text(), "alert_type": json_values}
            ),
            json_values,
        ),
        "stage": st.one_of(
            st.fixed_dictionaries(
                {},
                optional={
                    "mcp_servers": st.lists(st.text(max_size=5)),
                    "previous_stage_events": json_values,
                    "previous_attempt": json_values,
                },
            ),
            json_values,
        ),
        "tools": st.lists(
            st.fixed_dictionaries(
                {"name": st.text(max_size=5)},
                optional={
                    "input_schema": st.dictionaries(
                        st.sampled_from(["properties", "required", "type"]), json_values
                    )
                },
            ),
            max_size=3,
        ),
        "chat": st.one_of(
            st.fixed_dictionaries(
                {"user_question": st.text()},
                optional={"history": json_values, "investigation_events": json_values},
            ),
            json_values,
        ),
        "forced_conclusion": st.fixed_dictionaries(
            {"iteration": json_values}, optional={"strategy": json_values}
        ),
        "mcp_summarization": st.fixed_dictionaries(
            {"max_summary_tokens": json_values}, optional={"result_text": json_values}
        ),
        "executive_summary": st.fixed_dictionaries({}, optional={"final_analysis": json_values}),
        "legacy": st.fixed_dictionaries(
            {"alert_data": st.dictionaries(st.text(max_size=8), json_values, max_size=4)},
            optional={
                "tools": json_values,
                "react_history": json_values,
                "iteration_history": json_values,
                "runbook_content": json_values,
            },
        ),
        "skill_react": st.fixed_dictionaries(
            {
                "skill": st.fixed_dictionaries(
                    {"name": st.text(max_size=5)}, optional={"content": json_values}
                )
            },
            optional={
                "tools": json_values,
                "allowed_tools": json_values,
                "available_files": json_values,
            },
        ),
        "skill_error_observation": st.dictionaries(
            st.sampled_from(["tool_name", "error", "retry_count"]), json_values
        ),
        "system_prompt": st.dictionaries(
            st.sampled_from(["mode", "context_tokens", "tier", "goal", "skills"]), json_values
        ),
    },
)


def assert_is_reply(outcome: Any) -> None:
    reply = orjson.loads(outcome.body)
    assert reply["status"] in {"ok", "error"}
    if reply["status"] == "ok":
        assert reply["messages"] and all(set(m) == {"role", "content"} for m in reply["messages"])
    else:
        assert reply["error"]["code"] in {"invalid_json", "invalid_job", "payload_too_large"}, reply


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(json_values)
def test_arbitrary_json_never_raises(renderer: Renderer, value: Any) -> None:
    assert_is_reply(renderer.render(json.dumps(value).encode()))


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(job_like)
def test_job_shaped_values_never_raise(renderer: Renderer, value: Any) -> None:
    assert_is_reply(renderer.render(json.dumps(value).encode()))


@settings(max_examples=300)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_raise(renderer: Renderer, body: bytes) -> None:
    assert_is_reply(renderer.render(body))


@settings(max_examples=100)
@given(st.lists(st.binary(max_size=60), max_size=6))
def test_render_input_splitting_never_raises(renderer: Renderer, lines: list[bytes]) -> None:
    import io

    data = b"\n".join(lines)
    items = list(iter_jobs(io.BytesIO(data)))
    for _, _, body in items:
        if body is not None:
            assert_is_reply(renderer.render(body))
    # Nothing is lost: every non-blank input line is in some job's body.
    bodies = b"\n".join(body for _, _, body in items if body is not None)
    assert bodies.split() == data.split()
