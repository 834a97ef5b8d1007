"""Seed-000 conformance: every reference rendering matches to the byte."""

import hashlib
import json
from typing import Any

import pytest

from tests.data import CONFORMANCE, REPO, SEED_000_KINDS, TESTS, read_jsonl
from tests.render.conformance_helpers import assert_same_messages
from worker.render.renderer import Renderer

CASES = list(read_jsonl(CONFORMANCE / "cases.jsonl"))
# (sha256, path from the repository root), as `sha256sum` writes them.
REFERENCE_COPIES = [
    (digest, name)
    for digest, name in (
        line.split("  ", 1)
        for line in (TESTS / "reference-copies.sha256").read_text("utf-8").splitlines()
    )
]


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


@pytest.mark.parametrize("entry", REFERENCE_COPIES, ids=lambda entry: entry[1])
def test_the_reference_copies_are_the_ones_recorded(entry: tuple[str, str]) -> None:
    """The repository carries copies of the reference material (vectors, bench jobs) so
    the suite runs on a plain clone; tests/reference-copies.sha256 records their digests,
    and scripts/check-reference-copies checks those against the reference itself. A copy
    changed here without the reference is caught here."""
    digest, name = entry
    assert hashlib.sha256((REPO / name).read_bytes()).hexdigest() == digest, (
        f"{name} is not the reference copy recorded in tests/reference-copies.sha256: "
        "restore it, or copy the reference in and run scripts/check-reference-copies"
    )


def test_every_copy_of_reference_material_is_recorded() -> None:
    recorded = {name for _, name in REFERENCE_COPIES}
    assert recorded == {
        f"tests/conformance/{name}" for name in ("cases.jsonl", "families.jsonl", "worker.yaml")
    } | {
        f"tests/bench_jobs/{name}"
        for name in ("typical_react_job.json", "typical_chat_job.json", "worker.yaml")
    }
