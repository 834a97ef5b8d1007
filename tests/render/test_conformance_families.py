"""Seed-001/002 conformance: every reference rendering of families.jsonl, byte for byte."""

import json
from typing import Any

import pytest

from tests.data import CONFORMANCE, read_jsonl
from tests.render.conformance_helpers import assert_same_messages
from worker.render.renderer import Renderer

CASES = list(read_jsonl(CONFORMANCE / "families.jsonl"))


def test_the_suite_has_every_family_kind() -> None:
    kinds = {case["job"]["kind"] for case in CASES}
    assert kinds == {
        "legacy_react",
        "legacy_stage_react",
        "legacy_final_analysis",
        "legacy_tool_selection",
        "legacy_iterative_tool_selection",
        "skill_react",
        "skill_error_observation",
    }


@pytest.mark.parametrize("case", CASES, ids=[case["job"]["job_id"] for case in CASES])
def test_family_case_matches_byte_for_byte(
    conformance_renderer: Renderer, case: dict[str, Any]
) -> None:
    outcome = conformance_renderer.render(json.dumps(case["job"]).encode("utf-8"))

    assert outcome.status == "ok", outcome.body
    assert_same_messages(outcome.messages, case["expected_messages"])
    # The bytes on the wire carry the same text (orjson round trip).
    assert json.loads(outcome.body)["messages"] == case["expected_messages"]
