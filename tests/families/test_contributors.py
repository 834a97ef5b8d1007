"""Prompt contributors (seed 004, CONTRACT.md §10): which apply, in which order, where."""

import copy
import hashlib
import json
from typing import Any

import pytest
import yaml

from schemas.job import Job
from tests.data import CONFORMANCE, read_jsonl
from tests.families.seed_text import seed_004_episodic_memory
from worker.errors import ConfigError
from worker.families.contributors import ContributorDefinition, Contributors
from worker.render.config import parse_config
from worker.render.renderer import Renderer

SYSTEM = {"role": "system", "content": "BASE"}
USER = {"role": "user", "content": "question"}


def contributors(*definitions: dict[str, Any]) -> Contributors:
    return Contributors.from_config(parse_config({"contributors": list(definitions)}).contributors)


def a_job(kind: str = "executive_summary", agent: str | None = None) -> Job:
    data: dict[str, Any] = {"job_id": "j", "kind": kind, "stage": {"agent_name": agent}}
    return Job.model_validate(data)


def test_with_no_contributors_the_messages_are_returned_untouched() -> None:
    none = Contributors.from_config([])
    messages = [dict(SYSTEM), dict(USER)]
    assert none.apply(a_job(), messages) is messages


def test_contributions_follow_priority_then_name() -> None:
    applied = contributors(
        {"name": "late", "priority": 10, "text": "LATE"},
        {"name": "b-tie", "priority": 1, "text": "B"},
        {"name": "early", "priority": -5, "text": "EARLY"},
        {"name": "a-tie", "priority": 1, "text": "A"},
    ).apply(a_job(), [SYSTEM, USER])
    assert applied == [
        {"role": "system", "content": "BASE\n\nEARLY\n\nA\n\nB\n\nLATE"},
        USER,
    ]


def test_contribution_text_is_trimmed_so_exactly_one_blank_line_precedes_it() -> None:
    applied = contributors({"name": "x", "text": "\nline one\nline two\n"}).apply(a_job(), [SYSTEM])
    assert applied[0]["content"] == "BASE\n\nline one\nline two"


@pytest.mark.parametrize(
    ("applies_to", "kind", "applies"),
    [
        (["all"], "react", True),
        (["all"], "legacy_final_analysis", True),
        (["executive_summary"], "executive_summary", True),
        (["executive_summary"], "react", False),
        (["native-thinking"], "native_thinking", True),
        (["system_prompt", "synthesis"], "synthesis", True),
    ],
)
def test_applies_by_kind(applies_to: list[str], kind: str, applies: bool) -> None:
    applied = contributors({"name": "x", "applies_to": applies_to, "text": "X"}).apply(
        a_job(kind), [SYSTEM]
    )
    assert applied[0]["content"] == ("BASE\n\nX" if applies else "BASE")


def test_applies_to_defaults_to_all() -> None:
    assert (
        contributors({"name": "x", "text": "X"}).apply(a_job("skill_react"), [SYSTEM])[0]["content"]
        == "BASE\n\nX"
    )


@pytest.mark.parametrize(
    ("agent", "applies"),
    [("KubernetesAgent", True), ("ArgoAgent", True), ("OtherAgent", False), (None, False)],
)
def test_applies_by_agent_name(agent: str | None, applies: bool) -> None:
    filtered = contributors(
        {"name": "k8s", "agents": ["KubernetesAgent", "ArgoAgent"], "text": "K"},
        {"name": "everyone", "priority": 1, "text": "E"},
    )
    content = filtered.apply(a_job(agent=agent), [SYSTEM])[0]["content"]
    assert content == ("BASE\n\nK\n\nE" if applies else "BASE\n\nE")


def test_replies_without_a_system_message_are_left_alone() -> None:
    everything = contributors({"name": "x", "text": "X"})
    only_user = [USER]
    assert everything.apply(a_job("forced_conclusion"), only_user) is only_user
    user_first = [USER, SYSTEM]
    assert everything.apply(a_job(), user_first) == [USER, SYSTEM]


def test_the_input_messages_are_not_modified() -> None:
    messages = [dict(SYSTEM), dict(USER)]
    before = copy.deepcopy(messages)
    contributors({"name": "x", "text": "X"}).apply(a_job(), messages)
    assert messages == before


# ---- the built-in episodic-memory guidance ------------------------------------------

# sha256 of the guidance block in seed 004 (section 5), computed from the seed file: the
# copy in tests/families/seeds/ is checked against it too.
EPISODIC_SHA256 = "59be25a84dfcc66c40b22e08732586218f7f85a9facc792a893bcd7feb693d05"


def test_the_episodic_memory_builtin_is_seed_004_verbatim() -> None:
    applied = contributors({"name": "memory", "builtin": "episodic-memory"}).apply(
        a_job(), [SYSTEM]
    )
    content = applied[0]["content"]
    assert content.startswith("BASE\n\n## Episodic Memory Tool\n")
    guidance = content.removeprefix("BASE\n\n")
    assert hashlib.sha256(guidance.encode("utf-8")).hexdigest() == EPISODIC_SHA256
    assert "in the knowledge graph. \nWithout reflection" in guidance

    assert guidance == seed_004_episodic_memory()


# ---- configuration errors -----------------------------------------------------------


@pytest.mark.parametrize(
    "definition",
    [
        {"name": "x"},
        {"name": "x", "text": "X", "builtin": "episodic-memory"},
        {"name": "x", "text": "   "},
        {"name": "x", "builtin": "semantic-memory"},
        {"name": "x", "text": "X", "applies_to": ["reactt"]},
        {"name": "x", "text": "X", "applies_to": []},
        {"name": "x", "text": "X", "agents": []},
        {"name": "", "text": "X"},
        {"name": "x", "text": "X", "when": "always"},
    ],
)
def test_malformed_contributors_are_config_errors(definition: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        parse_config({"contributors": [definition]})


def test_duplicate_names_are_a_config_error() -> None:
    config = parse_config(
        {"contributors": [{"name": "x", "text": "1"}, {"name": "x", "text": "2", "priority": 3}]}
    )
    with pytest.raises(ConfigError, match="x"):
        Renderer(config)


def test_definition_defaults() -> None:
    definition = ContributorDefinition(name="x", text="X")
    assert (definition.priority, definition.applies_to, definition.agents) == (0, ("all",), None)


# ---- through the renderer, every family -----------------------------------------------


def with_contributors(extra: list[dict[str, Any]]) -> Renderer:
    data = yaml.safe_load((CONFORMANCE / "worker.yaml").read_text(encoding="utf-8"))
    data["contributors"] = extra
    return Renderer(parse_config(data))


CASES = [*read_jsonl(CONFORMANCE / "cases.jsonl"), *read_jsonl(CONFORMANCE / "families.jsonl")]


def test_every_family_gets_the_contribution_at_the_end_of_its_system_message() -> None:
    renderer = with_contributors(
        [
            {"name": "memory", "priority": 2, "builtin": "episodic-memory"},
            {"name": "house-rules", "priority": 1, "text": "HOUSE RULES"},
        ]
    )
    memory = contributors({"name": "m", "builtin": "episodic-memory"}).apply(a_job(), [SYSTEM])
    suffix = "\n\nHOUSE RULES" + memory[0]["content"].removeprefix("BASE")
    seen = set()
    for case in CASES:
        outcome = renderer.render(json.dumps(case["job"]))
        assert outcome.status == "ok", outcome.body
        expected = [dict(m) for m in case["expected_messages"]]
        if expected[0]["role"] == "system":
            expected[0]["content"] += suffix
            seen.add(case["job"]["kind"])
        assert outcome.messages == expected, case["job"]["job_id"]
    # The vectors cover every family that has a system message.
    assert {"react", "executive_summary", "legacy_react", "skill_react"} <= seen


def test_contributors_that_do_not_apply_leave_every_reply_identical() -> None:
    renderer_with = with_contributors(
        [{"name": "x", "applies_to": ["system_prompt"], "agents": ["Nobody"], "text": "X"}]
    )
    plain = with_contributors([])
    for case in CASES:
        body = json.dumps(case["job"])
        assert renderer_with.render(body).messages == plain.render(body).messages


def test_agent_filter_matches_the_legacy_payload_agent_name() -> None:
    """Legacy (seed-001) jobs carry their agent in `legacy.agent_name`, not in `stage`."""
    from worker.render.config import parse_config
    from worker.render.renderer import Renderer

    config = parse_config(
        {
            "contributors": [
                {
                    "name": "argo",
                    "priority": 1,
                    "applies_to": ["all"],
                    "agents": ["ArgoCDAgent"],
                    "text": "ARGO NOTE",
                }
            ]
        }
    )
    renderer = Renderer(config)
    job = {
        "job_id": "l",
        "kind": "legacy_final_analysis",
        "legacy": {"alert_data": {"alert_type": "x"}, "agent_name": "ArgoCDAgent"},
    }
    import json

    ok = renderer.render(json.dumps(job).encode())
    assert ok.messages is not None and ok.messages[0]["content"].endswith("\n\nARGO NOTE")
    job["legacy"]["agent_name"] = "OtherAgent"  # type: ignore[index]
    other = renderer.render(json.dumps(job).encode())
    assert other.messages is not None and "ARGO NOTE" not in other.messages[0]["content"]
