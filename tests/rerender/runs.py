"""Real re-render runs for the drift page tests.

The runs re-render the conformance cases after a template edit: the tarsy family's
general instructions are changed in this process (the render processes are forked from
it, so they render with the edit too) and the family gets the template version the edit
gives it. What the conformance files expect is what the worker sent *before* the edit.
"""

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from tests.rerender.files import CONFIG, CONFORMANCE_FILES, write_lines
from worker.cli import main
from worker.families import FAMILIES
from worker.families.base import template_version
from worker.families.tarsy import builder as tarsy
from worker.families.tarsy import instructions
from worker.families.tarsy.templates import GENERAL_INSTRUCTIONS

EDIT_BEFORE = "Always be specific, reference actual data, and provide clear next steps."
EDIT_AFTER = "Always be specific: quote the data you rely on, and end with clear next steps."
# Job text no page may run as markup.
HOSTILE = '</script><img src=x onerror="window.__xss=1"><!--'


def conformance_cases() -> list[dict[str, Any]]:
    cases = []
    for path in CONFORMANCE_FILES:
        cases += [
            json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line
        ]
    return cases


@contextmanager
def tarsy_template_edit() -> Iterator[str]:
    """Render the tarsy family with EDIT_AFTER for EDIT_BEFORE; yields its new version."""
    with pytest.MonkeyPatch.context() as patch:
        text = GENERAL_INSTRUCTIONS
        assert EDIT_BEFORE in text
        patch.setattr(instructions, "GENERAL_INSTRUCTIONS", text.replace(EDIT_BEFORE, EDIT_AFTER))
        # The family as it is, but for its version: its growth point and cut plans too.
        edited = replace(
            tarsy.FAMILY, template_version=template_version("tarsy", tarsy.versioned_texts())
        )
        assert edited.template_version != tarsy.FAMILY.template_version
        for kind, family in list(FAMILIES.items()):
            if family is tarsy.FAMILY:
                patch.setitem(FAMILIES, kind, edited)
        yield edited.template_version


def sent_meta(case: dict[str, Any]) -> dict[str, str]:
    """The reply meta the worker sent with the expected messages (before the edit)."""
    family = FAMILIES[case["job"]["kind"]]
    return {"family": family.name, "template_version": family.template_version}


@dataclass(frozen=True)
class Run:
    input: Path
    output: Path
    report: dict[str, Any]
    html: Path
    exit_code: int
    version_after: str


def rerender_with_edit(directory: Path, lines: list[str], *extra: str) -> Run:
    """Re-render `lines` with the template edit, writing the drift page as it ends."""
    directory.mkdir(parents=True, exist_ok=True)
    source = write_lines(directory / "in.jsonl", lines)
    output, report, html = (
        directory / "out.jsonl",
        directory / "report.json",
        directory / "drift.html",
    )
    with tarsy_template_edit() as version:
        code = main(
            ["rerender", str(source), "--out", str(output), "--config", CONFIG,
             "--progress", "off", "--report", str(report), "--html", str(html),
             "--diff-limit", "0", *extra]
        )  # fmt: skip
    return Run(source, output, json.loads(report.read_text()), html, code, version)


def review_lines() -> tuple[list[str], dict[str, Any]]:
    """The conformance cases (with the meta they were sent with) plus what a real
    archive holds too: a job also edited by hand, jobs that no longer validate, bad
    lines, a blank line, and a job whose id and text are hostile markup.

    Returns the lines and facts about them the tests check the page against.
    """
    cases = conformance_cases()
    lines = []
    for case in cases:
        lines.append(json.dumps({**case, "meta": sent_meta(case)}))
    # One job whose prior user message had an extra line: a change of its own.
    hand = json.loads(lines[17])
    hand["expected_messages"][-1]["content"] += "\nA LINE THAT WAS SENT"
    lines[17] = json.dumps(hand)
    hostile = json.loads(lines[3])
    hostile["job"]["job_id"] = "xss" + HOSTILE
    hostile["expected_messages"][0]["content"] += HOSTILE
    lines.append(json.dumps(hostile))
    messages = [{"role": "user", "content": "hello"}]
    lines += [
        json.dumps(
            {"job": {"job_id": "gone-kind-1", "kind": "retired_kind"}, "messages": messages}
        ),
        json.dumps(
            {"job": {"job_id": "gone-kind-2", "kind": "retired_kind"}, "messages": messages}
        ),
        json.dumps(
            {"job": {"job_id": "bad-stage-1", "kind": "react", "stage": "x"}, "messages": messages}
        ),
        json.dumps(
            {"job": {"job_id": "bad-tools-1", "kind": "react", "tools": "x"}, "messages": messages}
        ),
    ]
    lines.insert(5, "{not json")
    lines.insert(9, "")
    lines.insert(30, "[1, 2]")
    lines.insert(
        31, json.dumps({"job": {"job_id": "bad-msgs-1", "kind": "react"}, "messages": "x"})
    )
    facts = {
        "hand_edited": hand["job"]["job_id"],
        "hostile": hostile["job"]["job_id"],
        "bad_lines": [6, 31, 32],
        "error_ids": {"gone-kind-1", "gone-kind-2", "bad-stage-1", "bad-tools-1"},
    }
    return lines, facts
