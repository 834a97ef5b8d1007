"""The README and docs/ stand on their own in a clone, and say what the code does."""

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.data import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# [text](target) with a relative target; anchors and web addresses are not files.
LINK = re.compile(r"\]\((?!https?://|mailto:|#)([^)\s]+)\)")


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: path.name)
def test_relative_links_resolve_inside_the_repository(doc: Path) -> None:
    targets = LINK.findall(doc.read_text(encoding="utf-8"))
    assert targets or doc.name not in ("README.md", "OPERATIONS.md")
    broken = []
    for target in targets:
        path = (doc.parent / target.split("#", 1)[0]).resolve()
        if not path.is_relative_to(REPO) or not path.exists():
            broken.append(target)
    assert broken == []


def _readme_sample() -> tuple[list[str], dict[str, Any]]:
    """The command and the reply README.md shows under "Render a job without a broker"."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Render a job without a broker") :]
    command = re.search(r"```sh\n(.*?)```", section, re.S)
    sample = re.search(r"```json\n(.*?)```", section, re.S)
    assert command is not None and sample is not None
    argv = command.group(1).replace("\\\n", " ").split()
    return argv, json.loads(sample.group(1))


def test_the_readme_shows_what_render_prints() -> None:
    argv, shown = _readme_sample()
    assert argv[0] == ".venv/bin/prompt-worker"
    run = subprocess.run(
        [sys.executable, "-m", "worker", *argv[1:]],
        cwd=REPO,
        capture_output=True,
        check=True,
    )
    [line] = run.stdout.decode().splitlines()
    printed = json.loads(line)
    for reply in (shown, printed):
        reply["meta"].pop("render_ms")
    # The README cuts the messages' contents short, marked with an ellipsis.
    for shown_message, printed_message in zip(shown["messages"], printed["messages"], strict=True):
        prefix = shown_message.pop("content")
        assert prefix.endswith("…")
        assert printed_message.pop("content").startswith(prefix[:-1])
    assert shown == printed
