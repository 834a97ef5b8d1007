"""Assembly of the system message (seed 003's order) and the prompt registry."""

from pathlib import Path
from typing import Any

import pytest

from tests.families.seed_text import seed_003_assembly_order
from tests.families.system_prompt.helpers import build, bundled, system_text
from worker.errors import ConfigError
from worker.families.system_prompt.builder import prepare
from worker.render.config import parse_config


@pytest.fixture()
def marked(tmp_path: Path) -> dict[str, Any]:
    """A config whose every section is a recognisable marker, independent of the
    bundled text: templates and built-ins are replaced through the configuration."""
    (tmp_path / "assistant").mkdir()
    (tmp_path / "assistant" / "tier2.md").write_text("TEMPLATE\n", encoding="utf-8")
    return {
        "templates_dir": str(tmp_path),
        "prompts": [
            {"id": "core-mandates", "name": "m", "content": "MANDATES"},
            {"id": "sanity-reality-check", "name": "s", "content": "SANITY\n"},
            {"id": "skill-a", "name": "A", "content": "SKILL A\n"},
            {"id": "skill-b", "name": "B", "content": "  SKILL B", "tags": ["skill"]},
        ],
    }


GOAL = {"description": "G", "checkpoints": [{"description": "c", "status": "in-progress"}]}
GOAL_BLOCK = (
    "CURRENT GOAL: G\nPriority: Medium\nStatus: Active\n\nCheckpoints:\n🔄 1. c (IN PROGRESS)"
)


def test_sections_come_in_seed_order_joined_by_a_blank_line(marked: dict[str, Any]) -> None:
    payload = {
        "tier": 2,
        "goal": GOAL,
        "skills": ["skill-b", "skill-a"],
        "additional_instructions": "EXTRA\n",
    }
    # Each section of seed 003's assembly order, as the markers above make it.
    sections = {
        "Core Mandates": ["MANDATES"],
        "Active Goals": [GOAL_BLOCK],
        "Active Skills": ["SKILL B", "SKILL A"],
        "Sanity Checks": ["SANITY"],
        "Additional Instructions": ["EXTRA"],
    }
    order = seed_003_assembly_order()
    assert sorted(order) == sorted(sections)
    expected = ["TEMPLATE"] + [text for name in order for text in sections[name]]
    assert system_text(build(payload, marked)) == "\n\n".join(expected)


def test_empty_sections_are_left_out(marked: dict[str, Any]) -> None:
    payload = {"tier": 2, "use_sanity_checks": False, "additional_instructions": " \n "}
    assert system_text(build(payload, marked)) == "TEMPLATE\n\nMANDATES"


def test_an_empty_override_template_is_an_empty_section(tmp_path: Path) -> None:
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "tier1.md").write_text("\n", encoding="utf-8")
    config = {
        "templates_dir": str(tmp_path),
        "prompts": [{"id": "core-mandates", "name": "m", "content": "M"}],
    }
    text = system_text(build({"mode": "user", "tier": 1, "use_sanity_checks": False}, config))
    assert text == "M"


def test_missing_skills_are_skipped_and_named_in_warnings(marked: dict[str, Any]) -> None:
    result = build({"tier": 2, "skills": ["nope", "skill-a", "also-nope"]}, marked)
    assert system_text(result) == "TEMPLATE\n\nMANDATES\n\nSKILL A\n\nSANITY"
    assert len(result.warnings) == 2
    assert "'nope'" in result.warnings[0]
    assert "'also-nope'" in result.warnings[1]


def test_a_repeated_skill_is_included_once(marked: dict[str, Any]) -> None:
    result = build({"tier": 2, "skills": ["skill-a", "skill-b", "skill-a", "gone", "gone"]}, marked)
    assert system_text(result).count("SKILL A") == 1
    assert len(result.warnings) == 1


def test_builtins_are_used_when_not_overridden() -> None:
    text = system_text(build({"mode": "developer", "tier": 3}))
    template = bundled("developer", 3).strip()
    assert text.startswith(template + "\n\n## Core Mandates\n")
    assert text.endswith("label assumptions as such.")
    without = system_text(build({"mode": "developer", "tier": 3, "use_sanity_checks": False}))
    assert without == text[: text.rindex("\n\n")]


def test_a_builtin_prompt_can_be_asked_for_as_a_skill() -> None:
    result = build({"tier": 1, "skills": ["sanity-reality-check"], "use_sanity_checks": False})
    assert result.warnings == []
    assert "## Reality Check" in system_text(result)


def test_duplicate_configured_prompt_ids_are_a_config_error() -> None:
    config = parse_config(
        {
            "prompts": [
                {"id": "x", "name": "1", "content": "a"},
                {"id": "x", "name": "2", "content": "b"},
            ]
        }
    )
    with pytest.raises(ConfigError, match="'x' is defined more than once"):
        prepare(config.system_prompt())


@pytest.mark.parametrize(
    "prompt",
    [
        {"id": "", "name": "n", "content": "c"},
        {"id": "i", "content": "c"},
        {"id": "i", "name": "n", "content": "c", "owner": "me"},
    ],
)
def test_malformed_prompts_are_config_errors(prompt: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        parse_config({"prompts": [prompt]})


def test_optional_prompt_fields_are_accepted() -> None:
    config = parse_config(
        {
            "prompts": [
                {
                    "id": "k8s",
                    "name": "Kubernetes",
                    "content": "K",
                    "description": "triage",
                    "tags": ["skill", "kubernetes"],
                    "required_tools": ["kubernetes-server.pods_list"],
                }
            ]
        }
    )
    registered = prepare(config.system_prompt()).registry.get("k8s")
    assert registered is not None
    assert registered.tags == ("skill", "kubernetes")
    assert registered.required_tools == ("kubernetes-server.pods_list",)


def test_without_prepared_state_build_fails_loudly() -> None:
    from schemas.job import Job
    from worker.families.base import RenderContext
    from worker.families.system_prompt.builder import FAMILY

    job = Job.model_validate({"job_id": "j", "kind": "system_prompt", "system_prompt": {}})
    with pytest.raises(RuntimeError, match="templates not loaded"):
        FAMILY.build(job, RenderContext())
