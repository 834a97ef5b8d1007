"""The system_prompt kind through the whole render path: replies, errors, examples, the
bench job, and property tests over arbitrary payloads."""

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.system_prompt import Goal
from tests.families.seed_text import seed_003_assembly_order
from tests.families.system_prompt.helpers import BUDGETS, REPO, job
from worker.families.system_prompt.goal import render_goal
from worker.render.config import load_config, parse_config
from worker.render.renderer import Renderer

EXAMPLES = REPO / "examples"
BENCH_JOBS = REPO / "bench" / "jobs"


def reply(renderer: Renderer, data: Any) -> dict[str, Any]:
    outcome = renderer.render(json.dumps(data))
    body: dict[str, Any] = json.loads(outcome.body)
    assert body["status"] == outcome.status
    return body


@pytest.fixture(scope="module")
def plain() -> Renderer:
    return Renderer()


def test_an_ok_reply_carries_the_system_message_and_tier_meta(plain: Renderer) -> None:
    body = reply(plain, job({"mode": "planning", "context_tokens": 20000, "skills": ["ghost"]}))
    assert body["status"] == "ok"
    assert body["kind"] == "system_prompt"
    assert [m["role"] for m in body["messages"]] == ["system"]
    meta = body["meta"]
    assert meta["family"] == "system_prompt"
    assert meta["template_version"].startswith("system_prompt-")
    assert (meta["tier"], meta["budget_tokens"]) == (3, 1000)
    assert meta["estimated_tokens"] == -(-len(body["messages"][0]["content"]) // 4)
    assert meta["over_budget"] is False
    assert meta["warnings"] == ["skill 'ghost' is not in the prompt registry; skipped"]


def test_the_reply_is_the_system_message_in_the_seeds_order(tmp_path: Path) -> None:
    """Through the whole render path, every section a marker (independent of the bundled
    text), in seed 003's assembly order after the mode's template."""
    (tmp_path / "debugger").mkdir()
    (tmp_path / "debugger" / "tier4.md").write_text("TEMPLATE\n", encoding="utf-8")
    config = {
        "templates_dir": str(tmp_path),
        "prompts": [
            {"id": "core-mandates", "name": "m", "content": "MANDATES"},
            {"id": "sanity-reality-check", "name": "s", "content": "SANITY"},
            {"id": "skill-a", "name": "A", "content": "SKILL A"},
        ],
    }
    payload = {
        "mode": "debugger",
        "tier": 4,
        "goal": {"description": "G"},
        "skills": ["skill-a"],
        "additional_instructions": "EXTRA",
    }
    body = reply(Renderer(parse_config(config)), job(payload))
    sections = {
        "Core Mandates": "MANDATES",
        "Active Goals": "CURRENT GOAL: G\nPriority: Medium\nStatus: Active",
        "Active Skills": "SKILL A",
        "Sanity Checks": "SANITY",
        "Additional Instructions": "EXTRA",
    }
    expected = "\n\n".join(["TEMPLATE"] + [sections[name] for name in seed_003_assembly_order()])
    assert body["messages"] == [{"role": "system", "content": expected}]
    assert body["meta"]["warnings"] == []


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"tier": 2, "context_tokens": 9000}, "system_prompt"),
        ({"tier": 0}, "system_prompt.tier"),
        ({"tier": 6}, "system_prompt.tier"),
        ({"tier": "3"}, "system_prompt.tier"),
        ({"context_tokens": 0}, "system_prompt.context_tokens"),
        ({"context_tokens": 8192.0}, "system_prompt.context_tokens"),
        ({"mode": "expert"}, "system_prompt.mode"),
        ({"use_sanity_checks": "yes"}, "system_prompt.use_sanity_checks"),
        ({"skills": "k8s"}, "system_prompt.skills"),
        ({"goal": {"description": ""}}, "system_prompt.goal.description"),
        ({"goal": {"description": "g", "priority": "urgent"}}, "system_prompt.goal.priority"),
        (
            {"goal": {"description": "g", "checkpoints": [{"description": "c", "status": "done"}]}},
            "system_prompt.goal.checkpoints.0.status",
        ),
        (
            {"goal": {"description": "g", "artifacts": [{"path": "p"}]}},
            "system_prompt.goal.artifacts.0.action",
        ),
    ],
)
def test_invalid_payloads_are_invalid_job_naming_the_field(
    plain: Renderer, payload: dict[str, Any], field: str
) -> None:
    body = reply(plain, job(payload))
    assert body["status"] == "error"
    assert body["error"]["code"] == "invalid_job"
    assert field in [detail["field"] for detail in body["error"]["details"]]


def test_the_kind_needs_its_payload_and_the_payload_its_kind(plain: Renderer) -> None:
    missing = reply(plain, {"job_id": "j", "kind": "system_prompt"})
    assert missing["error"]["code"] == "invalid_job"
    stray = reply(
        plain,
        {"job_id": "j", "kind": "executive_summary", "executive_summary": {}, "system_prompt": {}},
    )
    assert stray["error"]["code"] == "invalid_job"


def test_unknown_payload_fields_are_ignored(plain: Renderer) -> None:
    known = {"tier": 1, "goal": {"description": "g"}}
    body = reply(
        plain, job({"tier": 1, "temperature": 0.2, "goal": {"description": "g", "owner": "x"}})
    )
    assert body["status"] == "ok"
    # The same prompt as without them, and each named in a warning, by its path.
    assert body["messages"] == reply(plain, job(known))["messages"]
    assert "CURRENT GOAL: g\n" in body["messages"][0]["content"]
    assert "owner" not in body["messages"][0]["content"]
    assert body["meta"]["warnings"] == [
        "unknown member 'system_prompt.temperature' of the job is ignored",
        "unknown member 'system_prompt.goal.owner' of the job is ignored",
    ]


# ---- the example configuration --------------------------------------------------------


@pytest.fixture(scope="module")
def example() -> Renderer:
    return Renderer(load_config(EXAMPLES / "worker.yaml"))


def test_the_example_override_template_is_used(example: Renderer) -> None:
    override = (EXAMPLES / "templates" / "debugger" / "tier3.md").read_text(encoding="utf-8")
    body = reply(example, job({"mode": "debugger", "context_tokens": 16384}))
    assert body["status"] == "ok", body
    assert body["messages"][0]["content"].startswith(override.strip() + "\n\n## Core Mandates\n")
    # Other tiers of the same mode are still the bundled ones.
    other = reply(example, job({"mode": "debugger", "tier": 2}))
    assert not other["messages"][0]["content"].startswith(override.strip())


def test_the_example_override_fits_its_budget(example: Renderer) -> None:
    meta = reply(example, job({"mode": "debugger", "tier": 3}))["meta"]
    assert meta["estimated_tokens"] <= BUDGETS[3]


def test_the_example_skills_and_contributors_apply(example: Renderer) -> None:
    payload = {
        "mode": "developer",
        "tier": 5,
        "skills": ["kubernetes-triage", "incident-communication"],
    }
    body = reply(example, job(payload, stage={"agent_name": "KubernetesAgent"}))
    content = body["messages"][0]["content"]
    assert body["meta"]["warnings"] == []
    triage = content.index("## Kubernetes Triage")
    updates = content.index("## Incident Updates")
    safety = content.index("Production safety:")
    memory = content.index("## Episodic Memory Tool")
    assert triage < updates < safety < memory
    assert content.endswith("→ REFLECT on connections")

    no_agent = reply(example, job(payload))["messages"][0]["content"]
    assert "Production safety:" not in no_agent
    assert "## Episodic Memory Tool" in no_agent


# ---- the bench job ---------------------------------------------------------------------


def test_the_bench_job_is_a_full_tier_5_prompt() -> None:
    renderer = Renderer(load_config(BENCH_JOBS / "worker_system_prompt.yaml"))
    data = json.loads((BENCH_JOBS / "typical_system_prompt_job.json").read_text(encoding="utf-8"))
    body = reply(renderer, data)
    assert body["status"] == "ok", body
    assert body["meta"]["tier"] == 5
    assert body["meta"]["warnings"] == []
    goal = data["system_prompt"]["goal"]
    assert goal["checkpoints"] and goal["decisions"] and goal["artifacts"]
    assert len(data["system_prompt"]["skills"]) == 2
    content = body["messages"][0]["content"]
    assert render_goal(Goal.model_validate(goal)) in content
    assert "## Kubernetes Triage" in content and "## Prometheus Queries" in content


# ---- properties --------------------------------------------------------------------------

text = st.text(max_size=40)
json_scalar = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | text
)
json_value = st.recursive(
    json_scalar,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)


def maybe(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly plausible values, sometimes anything at all."""
    return st.one_of(values, values, json_value)


checkpoint = st.fixed_dictionaries(
    {"description": maybe(text)},
    optional={"status": maybe(st.sampled_from(["pending", "in-progress", "completed"]))},
)
decision = st.fixed_dictionaries(
    {"description": maybe(text)},
    optional={"rationale": maybe(text), "locked": maybe(st.booleans())},
)
artifact = st.fixed_dictionaries(
    {"path": maybe(text), "action": maybe(st.sampled_from(["created", "modified", "deleted"]))},
    optional={"type": maybe(st.sampled_from(["file", "test", "documentation"]))},
)
goal_strategy = st.fixed_dictionaries(
    {"description": maybe(text)},
    optional={
        "priority": maybe(st.sampled_from(["high", "medium", "low"])),
        "status": maybe(st.sampled_from(["active", "paused", "completed"])),
        "checkpoints": maybe(st.lists(checkpoint, max_size=4)),
        "decisions": maybe(st.lists(decision, max_size=4)),
        "artifacts": maybe(st.lists(artifact, max_size=4)),
    },
)
payload_strategy = st.fixed_dictionaries(
    {},
    optional={
        "mode": maybe(st.sampled_from(["assistant", "developer", "planning", "debugger", "user"])),
        "context_tokens": maybe(st.integers(min_value=-5, max_value=200_000)),
        "tier": maybe(st.integers(min_value=-1, max_value=7)),
        "goal": maybe(goal_strategy),
        "skills": maybe(
            st.lists(
                st.sampled_from(["kubernetes-triage", "incident-communication", "x"]) | text,
                max_size=4,
            )
        ),
        "use_sanity_checks": maybe(st.booleans()),
        "additional_instructions": maybe(text),
    },
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payload=payload_strategy | json_value)
def test_arbitrary_payloads_get_an_ok_or_invalid_job_reply(example: Renderer, payload: Any) -> None:
    outcome = example.render(json.dumps(job(payload, stage={"agent_name": "KubernetesAgent"})))
    body = json.loads(outcome.body)
    if outcome.status == "ok":
        assert [m["role"] for m in body["messages"]] == ["system"]
        meta = body["meta"]
        assert meta["tier"] in BUDGETS
        assert meta["budget_tokens"] == BUDGETS[meta["tier"]]
        assert meta["over_budget"] == (meta["estimated_tokens"] > meta["budget_tokens"])
        if isinstance(payload, dict) and isinstance(payload.get("goal"), dict):
            assert (
                render_goal(Goal.model_validate(payload["goal"])) in body["messages"][0]["content"]
            )
    else:
        assert body["error"]["code"] == "invalid_job", body


@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_arbitrary_bodies_never_raise(example: Renderer, data: bytes) -> None:
    outcome = example.render(b'{"job_id":"j","kind":"system_prompt","system_prompt":' + data + b"}")
    assert outcome.status in ("ok", "error")
    if outcome.status == "error":
        assert outcome.error_code in ("invalid_json", "invalid_job")


def test_the_example_templates_dir_is_found_from_any_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_config(EXAMPLES / "worker.yaml")
    assert config.templates_dir == EXAMPLES / "templates"
