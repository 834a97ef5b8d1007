"""The tool-catalogue memo changes speed, never output."""

import json
from typing import Any

import orjson

from schemas.job import Job, Tool
from worker.prompt.catalogue import CATALOGUES, ToolCatalogueMemo
from worker.prompt.tools import format_tool_descriptions
from worker.render import Renderer

TOOLS = [
    {
        "name": "k8s.get",
        "description": "Get a resource",
        "input_schema": {"properties": {"name": {"type": "string"}}, "required": ["name"]},
    },
    {"name": "k8s.logs", "description": "Logs"},
]


def job(job_id: str, tools: Any = TOOLS, alert: str = "a") -> bytes:
    return json.dumps(
        {"job_id": job_id, "kind": "react", "session": {"alert_data": alert}, "tools": tools}
    ).encode()


def test_second_job_with_the_same_catalogue_renders_the_same_text() -> None:
    renderer = Renderer()
    CATALOGUES.clear()
    first = renderer.render(job("1"))
    second = renderer.render(job("2"))
    assert first.messages == second.messages
    assert len(CATALOGUES) == 1


def test_hit_and_miss_agree_with_a_memo_free_rendering() -> None:
    renderer = Renderer()
    CATALOGUES.clear()
    expected = format_tool_descriptions([Tool.model_validate(t) for t in TOOLS])
    for job_id in ("miss", "hit"):
        user = renderer.render(job(job_id, alert=job_id)).messages[1]["content"]  # type: ignore[index]
        assert expected in user
        assert f"<!-- ALERT_DATA_START -->\n{job_id}\n" in user


def test_a_job_validated_on_a_hit_equals_the_one_validated_on_a_miss() -> None:
    CATALOGUES.clear()
    data = json.loads(job("same"))
    miss = Renderer._validate(data)
    hit = Renderer._validate(data)
    assert hit == miss == Job.model_validate(data)
    assert hit.model_fields_set == miss.model_fields_set
    assert hit.tools is miss.tools  # the memoised list itself: the text memo keys on it
    assert hit.model_dump() == miss.model_dump()


def test_other_fields_are_still_validated_on_a_hit() -> None:
    renderer = Renderer()
    renderer.render(job("warm"))
    body = json.loads(job("bad"))
    body["session"]["alert_data"] = 5
    reply = orjson.loads(renderer.render(json.dumps(body).encode()).body)
    assert reply["error"]["code"] == "invalid_job"
    assert {d["field"] for d in reply["error"]["details"]} == {"session.alert_data"}


def test_invalid_catalogues_are_reported_and_not_remembered() -> None:
    renderer = Renderer()
    CATALOGUES.clear()
    reply = orjson.loads(renderer.render(job("x", tools=[{"description": "no name"}])).body)
    assert {d["field"] for d in reply["error"]["details"]} == {"tools.0.name"}
    assert len(CATALOGUES) == 0


def test_memo_is_bounded() -> None:
    memo = ToolCatalogueMemo(max_entries=3)
    for i in range(10):
        memo.remember(str(i).encode(), [Tool(name=str(i))])
        assert len(memo) <= 3


def test_text_is_kept_only_for_catalogued_lists() -> None:
    memo = ToolCatalogueMemo()
    stranger = [Tool(name="t")]
    memo.remember_text(stranger, "text")
    assert memo.text(stranger) is None
    known = [Tool(name="t")]
    memo.remember(b"k", known)
    memo.remember_text(known, "text")
    assert memo.text(known) == "text"
    assert memo.text(list(known)) is None  # an equal but different list is not trusted
