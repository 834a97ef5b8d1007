"""The tool-catalogue memo changes speed, never output."""

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.job import Job, Tool
from worker.families.tarsy.tools import format_tool_descriptions
from worker.render.catalogue import CATALOGUES, ToolCatalogueMemo
from worker.render.decode import load_body, validate_job
from worker.render.renderer import Renderer

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
    miss = validate_job(data)
    hit = validate_job(data)
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


def test_memo_is_bounded_in_bytes() -> None:
    memo = ToolCatalogueMemo(max_bytes=1600)
    assert memo.max_bytes // 16 == 100
    memo.remember(b"x" * 101, [Tool(name="huge")])  # over a sixteenth: not kept
    assert len(memo) == 0
    for i in range(40):
        memo.remember(str(i).encode() * (90 // len(str(i))), [Tool(name=str(i))])
        assert memo.bytes_kept <= 1600
    assert 0 < len(memo) < 40  # cleared on the way


def test_spellings_count_against_the_byte_bound() -> None:
    body = raw_job('"job_id":"j"', '"kind":"react"', f'"tools":{SPELT}')
    tight = ToolCatalogueMemo(max_bytes=16 * len(COMPACT))
    tight.remember(COMPACT, [Tool.model_validate(t) for t in TOOLS])
    tight.learn_spelling(body, COMPACT)
    assert tight.spellings() == 1
    assert tight.bytes_kept == 2 * len(COMPACT)
    full = ToolCatalogueMemo(max_bytes=16 * len(COMPACT))
    full.remember(COMPACT, [Tool.model_validate(t) for t in TOOLS])
    for i in range(15):  # other catalogues fill the memo to its bound
        full.remember(b"%02d" % i + COMPACT[2:], [Tool(name=str(i))])
    assert full.bytes_kept == full.max_bytes
    full.learn_spelling(body, COMPACT)
    assert full.spellings() == 0
    assert full.tools(COMPACT) is not None  # still memoised, only not its spelling


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


# -- known catalogues cut out of the raw bytes ---------------------------------------

COMPACT = orjson.dumps(TOOLS)


def reply_without_timing(renderer: Renderer, body: bytes) -> dict[str, Any]:
    reply: dict[str, Any] = orjson.loads(renderer.render(body).body)
    reply.get("meta", {}).pop("render_ms", None)
    return reply


def memo_free(renderer: Renderer, body: bytes) -> dict[str, Any]:
    CATALOGUES.clear()
    return reply_without_timing(renderer, body)


def warm(renderer: Renderer, spelling_source: bytes) -> None:
    """Teach the memo the catalogue and its spelling in `spelling_source`."""
    CATALOGUES.clear()
    renderer.render(spelling_source)  # remembered by its JSON
    renderer.render(spelling_source)  # seen again: its spelling is learnt
    assert CATALOGUES.spellings() == 1


def test_a_repeated_catalogue_is_cut_out_of_the_next_body(renderer: Renderer) -> None:
    first = job("1", alert="first")
    warm(renderer, first)
    body = job("2", alert="second")
    data, tools = load_body(body)
    assert "tools" not in data
    assert tools is CATALOGUES.tools(COMPACT)  # the memoised list itself
    assert data == {k: v for k, v in json.loads(body).items() if k != "tools"}
    located = reply_without_timing(renderer, body)
    assert located == memo_free(renderer, body)
    assert located["status"] == "ok"


def test_spellings_are_learnt_once_the_catalogue_is_known() -> None:
    pretty = json.dumps({"job_id": "p", "kind": "react", "tools": TOOLS}, indent=2).encode()
    compact = orjson.dumps({"job_id": "c", "kind": "react", "tools": TOOLS})
    CATALOGUES.clear()
    renderer = Renderer()
    for body, spellings in ((compact, 0), (compact, 1), (compact, 1), (pretty, 2), (pretty, 2)):
        renderer.render(body)
        assert CATALOGUES.spellings() == spellings
    assert load_body(pretty)[1] is load_body(compact)[1] is not None


def test_a_one_off_catalogue_costs_no_learning() -> None:
    CATALOGUES.clear()
    Renderer().render(job("once"))
    assert CATALOGUES.spellings() == 0


def raw_job(*members: str) -> bytes:
    return ("{" + ",".join(members) + "}").encode()


SPELT = COMPACT.decode()
BASE = ['"job_id":"j"', '"kind":"react"']
TEACHER = raw_job('"job_id":"teacher"', '"kind":"react"', f'"tools":{SPELT}')


@pytest.mark.parametrize(
    "members",
    [
        # the same spelling nested deeper, before the job's own key or instead of it
        [*BASE, f'"stage":{{"tools":{SPELT}}}', f'"tools":{SPELT}'],
        [*BASE, f'"stage":{{"tools":{SPELT}}}'],
        [*BASE, f'"stage":{{"tools":{SPELT}}}', '"tools":[]'],
        # a key given twice: the last one counts
        [*BASE, f'"tools":{SPELT}', '"tools":[]'],
        [*BASE, '"tools":[]', f'"tools":{SPELT}'],
        [*BASE, f'"tools":{SPELT}', f'"tools":{SPELT}'],
        # a key that only ends with "tools
        [*BASE, f'"x\\"tools":{SPELT}'],
        # the spelling as the start of a longer list, and inside a string
        [*BASE, f'"tools":{SPELT[:-1]},{{"name":"more"}}]'],
        [*BASE, '"session":{"alert_data":' + json.dumps(f'"tools":{SPELT}') + "}"],
        # members after the catalogue: not looked for, parsed whole
        [*BASE, f'"tools":{SPELT}', '"session":{"alert_data":"after"}'],
        # an object's last member that is not the job's
        [*BASE, f'"stage":{{"tools":{SPELT}}}'],
        [*BASE, f'"other":{SPELT}'],
        # not JSON after the spelling
        [*BASE, f'"tools":{SPELT}x'],
        [*BASE, f'"tools":{SPELT}', '"session":'],
    ],
)
def test_tricky_bodies_render_as_without_the_memo(renderer: Renderer, members: list[str]) -> None:
    body = raw_job(*members)
    expected = memo_free(renderer, body)
    warm(renderer, TEACHER)
    if body.endswith(f'"tools":{SPELT}}}'.encode()):
        assert CATALOGUES.locate(body) is not None  # the cut is tried on this body
    assert reply_without_timing(renderer, body) == expected


@settings(max_examples=150, deadline=None)
@given(
    places=st.lists(
        st.sampled_from(["top", "nested", "empty", "other", "string"]), min_size=1, max_size=4
    ),
    space=st.sampled_from(["", " ", "\n  "]),
)
def test_any_placement_of_a_known_spelling_renders_as_without_the_memo(
    renderer: Renderer, places: list[str], space: str
) -> None:
    values = {
        "top": f'"tools":{space}{SPELT}',
        "nested": f'"stage":{{"tools":{space}{SPELT}}}',
        "empty": '"tools":[]',
        "other": '"tools":[{"name":"other"}]',
        "string": '"session":{"alert_data":' + json.dumps(SPELT) + "}",
    }
    body = raw_job(*BASE, *(values[p] for p in places))
    expected = memo_free(renderer, body)
    warm(renderer, TEACHER)
    assert reply_without_timing(renderer, body) == expected


def test_only_a_spelling_of_the_catalogue_itself_is_learnt(renderer: Renderer) -> None:
    other = orjson.dumps([{"name": "other", "description": "x" * 80}]).decode()
    # The teacher's first "tools" key is a nested one holding another list.
    teacher = raw_job(*BASE, f'"stage":{{"tools":{other}}}', f'"tools":{SPELT}')
    warm(renderer, teacher)
    body = raw_job(*BASE, f'"tools":{other}')
    assert CATALOGUES.locate(body) is None
    assert reply_without_timing(renderer, body) == memo_free(renderer, body)


def test_members_after_the_catalogue_are_never_taken_for_part_of_it(renderer: Renderer) -> None:
    body = raw_job(*BASE, f'"tools":{SPELT}', '"chat":{"user_question":"why?"}')
    expected = memo_free(renderer, body)
    for _ in range(3):  # remembered, then seen again: nothing to learn from it
        assert reply_without_timing(renderer, body) == expected
    assert CATALOGUES.spellings() == 0
