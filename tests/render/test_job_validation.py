"""The job contract (CONTRACT.md §2-3): what is accepted, and how rejections are reported."""

import json
from typing import Any

import orjson
import pytest

from worker.render.renderer import Renderer


def render(renderer: Renderer, job: Any) -> dict[str, Any]:
    body = job if isinstance(job, bytes) else json.dumps(job).encode()
    reply: dict[str, Any] = orjson.loads(renderer.render(body).body)
    return reply


def fields(reply: dict[str, Any]) -> set[str]:
    return {d["field"] for d in reply["error"]["details"]}


def react(**extra: Any) -> dict[str, Any]:
    return {"job_id": "j-1", "kind": "react", "session": {"alert_data": "x"}, **extra}


def test_minimal_react_job_renders(renderer: Renderer) -> None:
    reply = render(renderer, {"job_id": "j", "kind": "react"})
    assert reply["status"] == "ok"
    assert [m["role"] for m in reply["messages"]] == ["system", "user"]


@pytest.mark.parametrize(
    ("alias", "canonical"),
    [("native-thinking", "native_thinking"), ("synthesis-native-thinking", "synthesis")],
)
def test_tarsy_kind_spellings_are_aliases(renderer: Renderer, alias: str, canonical: str) -> None:
    via_alias = render(renderer, {"job_id": "j", "kind": alias, "session": {"alert_data": "a"}})
    direct = render(renderer, {"job_id": "j", "kind": canonical, "session": {"alert_data": "a"}})
    assert via_alias["status"] == "ok"
    assert via_alias["kind"] == canonical
    assert via_alias["messages"] == direct["messages"]


def test_unknown_fields_are_ignored(renderer: Renderer) -> None:
    plain = render(renderer, react())
    extended = render(
        renderer,
        react(future_field={"a": 1}, session={"alert_data": "x", "severity": "critical"}),
    )
    assert extended["status"] == "ok"
    assert extended["messages"] == plain["messages"]
    assert plain["meta"]["warnings"] == []
    # Named by their path, at the top level and inside the job's objects alike.
    assert extended["meta"]["warnings"] == [
        "unknown member 'future_field' of the job is ignored",
        "unknown member 'session.severity' of the job is ignored",
    ]


@pytest.mark.parametrize(
    ("members", "warning"),
    [
        (
            {"stage": {"agent_nme": "KubernetesAgent"}},
            "unknown member 'stage.agent_nme' of the job is ignored; "
            "did you mean 'stage.agent_name'?",
        ),
        (
            {"session": {"alert_dta": "pod crashloop"}},
            "unknown member 'session.alert_dta' of the job is ignored; "
            "did you mean 'session.alert_data'?",
        ),
        (
            {"stage": {"previous_attempt": {"attempt_number": 1, "eror_message": "x"}}},
            "unknown member 'stage.previous_attempt.eror_message' of the job is ignored; "
            "did you mean 'stage.previous_attempt.error_message'?",
        ),
        (
            {
                "chat": {
                    "user_question": "why?",
                    "history": [
                        {"user_question": "a", "messages": []},
                        {"user_question": "b", "mesages": [{"role": "user", "content": "x"}]},
                    ],
                }
            },
            "unknown member 'chat.history[1].mesages' of the job is ignored; "
            "did you mean 'chat.history[1].messages'?",
        ),
        (
            {"tools": [{"name": "kubectl_get"}, {"name": "kubectl_logs", "descripton": "d"}]},
            "unknown member 'tools[1].descripton' of the job is ignored; "
            "did you mean 'tools[1].description'?",
        ),
        (
            {"budget": {"max_prompt_tokens": 9000, "tokeniser": "estimate"}},
            "unknown member 'budget.tokeniser' of the job is ignored; "
            "did you mean 'budget.tokenizer'?",
        ),
    ],
)
def test_a_misspelt_nested_member_is_named_by_its_path(
    renderer: Renderer, members: dict[str, Any], warning: str
) -> None:
    reply = render(renderer, react(**members))
    assert reply["status"] == "ok"
    assert reply["meta"]["warnings"][0] == warning


def test_members_the_contract_leaves_free_are_not_checked(renderer: Renderer) -> None:
    schema = {"type": "object", "properties": {"namespace": {"type": "string"}}}
    job = react(tools=[{"name": "kubectl_get", "input_schema": schema}])
    assert render(renderer, job)["meta"]["warnings"] == []


def test_a_misspelt_member_is_named_with_the_nearest_known_one(renderer: Renderer) -> None:
    tools = [{"name": "kubectl_get", "description": "Reads a Kubernetes resource."}]
    spelt = render(renderer, react(tools=tools))
    misspelt = render(renderer, react(tols=tools))
    assert misspelt["status"] == "ok"
    assert misspelt["meta"]["warnings"] == [
        "unknown member 'tols' of the job is ignored; did you mean 'tools'?"
    ]
    # Ignored, as the contract says: the prompt is the one without tools.
    assert "kubectl_get" in spelt["messages"][1]["content"]
    assert misspelt["messages"] == render(renderer, react())["messages"]


def test_unknown_members_come_before_the_familys_warnings(renderer: Renderer) -> None:
    job = react(stgae={}, stage={"mcp_servers": ["nowhere"]})
    assert render(renderer, job)["meta"]["warnings"] == [
        "unknown member 'stgae' of the job is ignored; did you mean 'stage'?",
        "MCP server 'nowhere' is not in the MCP server registry; its instructions are left out",
    ]


def test_many_unknown_members_are_named_up_to_ten_then_counted(renderer: Renderer) -> None:
    job = react(**{f"future_{n:02}": n for n in range(25)})
    warnings = render(renderer, job)["meta"]["warnings"]
    assert warnings[:10] == [
        f"unknown member 'future_{n:02}' of the job is ignored" for n in range(10)
    ]
    assert warnings[10:] == ["15 more unknown members are ignored"]


def test_unreadable_bytes_are_invalid_json_with_null_job_id(renderer: Renderer) -> None:
    reply = render(renderer, b'{"job_id": "j", "kind": ')
    assert reply["status"] == "error"
    assert reply["job_id"] is None
    assert reply["error"]["code"] == "invalid_json"
    assert "not valid JSON" in reply["error"]["message"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"nulx", "unquoted text that is not true, false or null (line 1, column 1)"),
        (b"hello", "unexpected 'h', expected a JSON value (line 1, column 1)"),
        (
            b'{"job_id": "j",\n "kind": ',
            "the text ends before the JSON value does (line 2, column 10)",
        ),
        (b'{"job_id": "j"} {}', "more text after the JSON value (line 1, column 17)"),
        (b'{"job_id": "j",}', "a comma before a closing bracket (line 1, column 15)"),
        (b"{'single': 1}", 'unexpected "\'", expected a string key (line 1, column 2)'),
        (b"\xff", "bytes that are not UTF-8 text (line 1, column 1)"),
        (b"", "the text is empty"),
    ],
)
def test_invalid_json_says_why_in_a_users_words(
    renderer: Renderer, body: bytes, message: str
) -> None:
    error = render(renderer, body)["error"]
    assert error["code"] == "invalid_json"
    assert error["message"] == f"body is not valid JSON: {message}"


@pytest.mark.parametrize("body", [b"\xff\xfe\x00", b"NaN", b"", b"{'single': 1}"])
def test_non_json_bodies_are_invalid_json(renderer: Renderer, body: bytes) -> None:
    assert render(renderer, body)["error"]["code"] == "invalid_json"


def test_integers_beyond_64_bits_are_read_as_floats_like_go_does(renderer: Renderer) -> None:
    schema = {"properties": {"n": {"type": "integer", "default": 2**70}}}
    job = react(tools=[{"name": "t", "description": "d", "input_schema": schema}])
    reply = render(renderer, job)
    assert reply["status"] == "ok"
    assert f"[default: {float(2**70)!r}]" in reply["messages"][1]["content"]


def test_lone_surrogates_are_invalid_json(renderer: Renderer) -> None:
    reply = render(
        renderer, b'{"job_id": "j", "kind": "react", "session": {"alert_data": "\\ud800"}}'
    )
    assert reply["error"]["code"] == "invalid_json"


@pytest.mark.parametrize("body", [[1, 2], "a string", 3, None])
def test_json_that_is_not_an_object_is_invalid_job(renderer: Renderer, body: Any) -> None:
    reply = render(renderer, body)
    assert reply["error"]["code"] == "invalid_job"
    assert reply["job_id"] is None


def test_each_offending_field_is_named(renderer: Renderer) -> None:
    reply = render(
        renderer,
        {
            "job_id": "",
            "kind": "react",
            "session": {"alert_data": 42},
            "stage": {"mcp_servers": ["ok", 7]},
            "tools": [{"description": "no name"}],
        },
    )
    assert reply["error"]["code"] == "invalid_job"
    assert fields(reply) == {
        "job_id",
        "session.alert_data",
        "stage.mcp_servers.1",
        "tools.0.name",
    }
    for detail in reply["error"]["details"]:
        assert detail["type"] and detail["message"]


def test_job_id_is_echoed_when_readable(renderer: Renderer) -> None:
    reply = render(renderer, {"job_id": "j-77", "kind": "bogus"})
    assert reply["job_id"] == "j-77"
    assert fields(reply) == {"kind"}


def test_missing_job_id_and_kind(renderer: Renderer) -> None:
    reply = render(renderer, {})
    assert fields(reply) == {"job_id", "kind"}


@pytest.mark.parametrize("kind", ["forced_conclusion", "mcp_summarization", "executive_summary"])
def test_payload_named_after_the_kind_is_required(renderer: Renderer, kind: str) -> None:
    reply = render(renderer, {"job_id": "j", "kind": kind})
    assert reply["error"]["code"] == "invalid_job"
    assert fields(reply) == {kind}
    assert reply["kind"] == kind


def test_payload_of_another_kind_is_rejected(renderer: Renderer) -> None:
    reply = render(renderer, react(executive_summary={"final_analysis": "x"}))
    assert fields(reply) == {"executive_summary"}


@pytest.mark.parametrize("kind", ["synthesis", "forced_conclusion"])
def test_chat_only_with_react_or_native_thinking(renderer: Renderer, kind: str) -> None:
    job: dict[str, Any] = {"job_id": "j", "kind": kind, "chat": {"user_question": "why?"}}
    if kind == "forced_conclusion":
        job["forced_conclusion"] = {"iteration": 1}
    reply = render(renderer, job)
    assert "chat" in fields(reply)


def test_chat_needs_a_non_empty_question(renderer: Renderer) -> None:
    reply = render(renderer, react(chat={"user_question": ""}))
    assert fields(reply) == {"chat.user_question"}
    reply = render(renderer, react(chat={}))
    assert fields(reply) == {"chat.user_question"}


def test_at_most_one_previous_stage_source(renderer: Renderer) -> None:
    stage = {"previous_stage_context": "ctx", "previous_stage_events": []}
    reply = render(renderer, react(stage=stage))
    assert fields(reply) == {"stage.previous_stage_events"}


def test_at_most_one_investigation_source(renderer: Renderer) -> None:
    chat = {"user_question": "q", "investigation_context": "c", "investigation_events": []}
    reply = render(renderer, react(chat=chat))
    assert fields(reply) == {"chat.investigation_events"}


@pytest.mark.parametrize(
    ("kind", "payload", "field"),
    [
        ("forced_conclusion", {"iteration": 0}, "forced_conclusion.iteration"),
        ("forced_conclusion", {"iteration": -3}, "forced_conclusion.iteration"),
        ("forced_conclusion", {"iteration": "3"}, "forced_conclusion.iteration"),
        ("forced_conclusion", {"iteration": 2, "strategy": "plan"}, "forced_conclusion.strategy"),
        ("mcp_summarization", {"max_summary_tokens": 0}, "mcp_summarization.max_summary_tokens"),
        ("mcp_summarization", {}, "mcp_summarization.max_summary_tokens"),
    ],
)
def test_positive_numbers_and_enums(
    renderer: Renderer, kind: str, payload: dict[str, Any], field: str
) -> None:
    reply = render(renderer, {"job_id": "j", "kind": kind, kind: payload})
    assert fields(reply) == {field}


def test_forced_conclusion_accepts_tarsy_strategy_spelling(renderer: Renderer) -> None:
    job = {"job_id": "j", "kind": "forced_conclusion"}
    dashed = render(
        renderer, {**job, "forced_conclusion": {"iteration": 3, "strategy": "native-thinking"}}
    )
    underscored = render(
        renderer, {**job, "forced_conclusion": {"iteration": 3, "strategy": "native_thinking"}}
    )
    assert dashed["status"] == "ok"
    assert dashed["messages"] == underscored["messages"]


def test_history_role_must_be_known(renderer: Renderer) -> None:
    chat = {
        "user_question": "q",
        "history": [{"user_question": "a", "messages": [{"role": "bot", "content": "x"}]}],
    }
    reply = render(renderer, react(chat=chat))
    assert fields(reply) == {"chat.history.0.messages.0.role"}


def test_rerun_context_is_not_for_chat(renderer: Renderer) -> None:
    job = react(chat={"user_question": "q"}, stage={"previous_attempt": {"attempt_number": 2}})
    assert fields(render(renderer, job)) == {"stage.previous_attempt"}


def test_oversize_body_is_payload_too_large_without_parsing() -> None:
    small = Renderer(max_message_bytes=100)
    body = json.dumps(react(session={"alert_data": "x" * 200})).encode()
    outcome = small.render(body)
    assert outcome.error_code == "payload_too_large"
    reply = orjson.loads(outcome.body)
    assert "exceeds the limit of 100 bytes" in reply["error"]["message"]
    assert outcome.request_bytes == len(body)


def test_ok_reply_meta(renderer: Renderer) -> None:
    reply = render(renderer, react())
    meta = reply["meta"]
    assert meta["family"] == "tarsy"
    assert meta["template_version"].startswith("tarsy-")
    assert meta["prompt_chars"] == sum(len(m["content"]) for m in reply["messages"])
    assert meta["masked"] == {}
    assert reply["job_id"] == "j-1"


def test_a_builder_bug_is_an_internal_error_reply(
    renderer: Renderer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from worker.families.tarsy import builder

    def explode(*_: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(builder, "build_react_messages", explode)
    outcome = renderer.render(json.dumps(react()).encode())
    assert outcome.error_code == "internal"
    assert isinstance(outcome.exception, RuntimeError)
    reply = orjson.loads(outcome.body)
    assert reply["job_id"] == "j-1"
    assert "RuntimeError" in reply["error"]["message"]


def test_wide_integers_stay_exact_for_python_semantics_families(renderer: Renderer) -> None:
    job = {
        "job_id": "j",
        "kind": "legacy_final_analysis",
        "legacy": {"alert_data": {"alert_type": "x", "event_id": 2**64, "ratio": 1e300}},
    }
    reply = render(renderer, job)
    assert reply["status"] == "ok"
    text = "\n".join(m["content"] for m in reply["messages"])
    assert str(2**64) in text
    assert "1e+300" in text  # a genuine float is still a float


def test_values_nested_too_deeply_to_render_are_invalid_jobs(renderer: Renderer) -> None:
    # Deep enough for Python's JSON encoder to give up, shallow enough for orjson to parse.
    deep = "[" * 1000 + '"x"' + "]" * 1000
    body = (
        '{"job_id": "j-1", "kind": "react", "tools": [{"name": "t", "input_schema": '
        '{"properties": {"p": {"default": ' + deep + "}}}}]}"
    ).encode()
    reply = render(renderer, body)
    assert reply["status"] == "error"
    assert reply["error"]["code"] == "invalid_job"
    assert reply["job_id"] == "j-1"
    assert "nested too deeply" in reply["error"]["message"]


def test_a_catalogue_with_a_misspelt_member_is_warned_of_on_every_job(
    renderer: Renderer,
) -> None:
    # A catalogue seen again is cut out of the body unparsed: one with an unknown member
    # must not be, or only its first job would say so.
    tools = [{"name": f"tool_{n}", "descripton": "reads things"} for n in range(3)]
    body = json.dumps(react(tools=tools)).encode()
    warning = (
        "unknown member 'tools[0].descripton' of the job is ignored; "
        "did you mean 'tools[0].description'?"
    )
    for _ in range(4):
        assert render(renderer, body)["meta"]["warnings"][0] == warning
