"""Seed-000 conformance: every reference rendering matches to the byte."""

import filecmp
import json
from typing import Any

import pytest

from tests.data import BENCH_JOBS, CONFORMANCE, SEED_000_KINDS, SHARED, read_jsonl
from tests.render.conformance_helpers import assert_same_messages
from tests.unavailable import not_beside_this_checkout
from worker.render.renderer import Renderer

CASES = list(read_jsonl(CONFORMANCE / "cases.jsonl"))


def test_the_suite_has_every_seed_000_kind() -> None:
    kinds = {case["job"]["kind"] for case in CASES}
    assert kinds == SEED_000_KINDS


@pytest.mark.parametrize("case", CASES, ids=[c["job"]["job_id"] for c in CASES])
def test_case_matches_byte_for_byte(conformance_renderer: Renderer, case: dict[str, Any]) -> None:
    outcome = conformance_renderer.render(json.dumps(case["job"]).encode())
    assert outcome.status == "ok", outcome.body
    assert_same_messages(outcome.messages, case["expected_messages"])
    # The bytes on the wire carry the same text (orjson round trip).
    assert json.loads(outcome.body)["messages"] == case["expected_messages"]


@pytest.mark.parametrize(
    ("copy", "original"),
    [
        (CONFORMANCE / name, SHARED / "conformance" / name)
        for name in ("cases.jsonl", "families.jsonl", "worker.yaml")
    ]
    + [
        (BENCH_JOBS / name, SHARED / "bench" / name)
        for name in ("typical_react_job.json", "typical_chat_job.json", "worker.yaml")
    ],
    ids=lambda p: p.name if hasattr(p, "name") else str(p),
)
def test_repository_copy_matches_shared_reference(copy: Any, original: Any) -> None:
    """The repository carries copies so the suite runs on a plain clone; they must not
    fall behind the reference material when it gains cases."""
    not_beside_this_checkout(original.parent)
    assert filecmp.cmp(copy, original, shallow=False), (
        f"{copy} differs from {original}: copy the reference file into the repository"
    )
