"""The README and docs/ stand on their own in a clone, and say what the code does."""

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.data import REPO
from worker.cli import build_parser

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# [text](target) with a relative target; web addresses are not files.
LINK = re.compile(r"\]\((?!https?://|mailto:)([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} +(.+?) *$", re.M)
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
# Each doc answers one kind of question, in a page a reader gets through (issue 32).
SIZE_LIMITS = {"README.md": 8 * 1024, "PERFORMANCE.md": 15 * 1024, "OPERATIONS.md": 30 * 1024}
# `docs/NAME.md, "Section"` or `docs/NAME.md ("Section"`: how code and docs cite a section.
CITATION = re.compile(r"\b([A-Z_]+\.md)\]?(?:\([^)]*\))?(?:,| \(|,? see) *\n?[#\s]*\"([^\"]+)\"")
# Paths inside the repository that a command line may name.
REPO_DIRS = ("tests/", "deploy/", "scripts/", "bench/", "examples/", "schemas/", "worker/", "docs/")
PROMPT_WORKER = ("prompt-worker", ".venv/bin/prompt-worker")


def without_code(text: str) -> str:
    """Markdown text without its fenced blocks, whose lines are not headings or links."""
    return FENCE.sub("", text)


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def headings(doc: Path) -> list[str]:
    return HEADING.findall(without_code(doc.read_text(encoding="utf-8")))


def anchors(doc: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for heading in headings(doc):
        slug = anchor(heading)
        found.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: path.name)
def test_relative_links_and_their_anchors_resolve_inside_the_repository(doc: Path) -> None:
    targets = LINK.findall(without_code(doc.read_text(encoding="utf-8")))
    assert targets or doc.name not in ("README.md", "OPERATIONS.md")
    broken = []
    for target in targets:
        file, _, fragment = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        missing = not path.is_relative_to(REPO) or not path.exists()
        if missing or (fragment and (path.suffix != ".md" or fragment not in anchors(path))):
            broken.append(target)
    assert broken == []


def test_the_anchor_of_a_heading_is_githubs() -> None:
    assert anchor("Broker restarts: at least once, never lost") == (
        "broker-restarts-at-least-once-never-lost"
    )
    assert anchor("Configuration reference (`prompt-worker serve`)") == (
        "configuration-reference-prompt-worker-serve"
    )


@pytest.mark.parametrize("name", sorted(SIZE_LIMITS))
def test_each_page_stays_within_its_size(name: str) -> None:
    path = REPO / name if name == "README.md" else REPO / "docs" / name
    assert len(path.read_bytes()) <= SIZE_LIMITS[name]


def _citing_files() -> list[Path]:
    roots = ("worker", "bench", "tests", "scripts", "schemas", "deploy", "docs")
    files = [REPO / "README.md", REPO / "Dockerfile"]
    for root in roots:
        files += [
            path
            for path in sorted((REPO / root).rglob("*"))
            if path.is_file()
            and "__pycache__" not in path.parts
            and path.suffix in (".py", ".md", ".yaml", ".yml", "")
        ]
    return files


def _citations() -> list[tuple[Path, str, str]]:
    found = []
    for path in _citing_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        # A citation wrapped over two comment lines reads as one line.
        text = re.sub(r"\n[ \t]*#[ \t]*", " ", text)
        text = re.sub(r"\s*\n\s*", " ", text)
        found += [(path, doc, section) for doc, section in CITATION.findall(text)]
    return found


def test_citations_of_doc_sections_name_sections_that_exist() -> None:
    citations = _citations()
    assert len(citations) > 20  # the pattern still finds the citations
    broken = []
    for path, doc, section in citations:
        target = REPO / doc if doc == "README.md" else REPO / "docs" / doc
        if not target.exists():
            continue  # a file of another project named in passing
        titles = [title.strip("`") for title in headings(target)]
        if not any(title.startswith(section.strip("`")) for title in titles):
            broken.append(f"{path.relative_to(REPO)}: {doc}, {section!r}")
    assert broken == []


def test_code_cites_performance_figures_by_section() -> None:
    bare = []
    for path in sorted((REPO / "worker").rglob("*.py")):
        text = re.sub(r"\s*\n\s*#?\s*", " ", path.read_text(encoding="utf-8"))
        for match in re.finditer(r"PERFORMANCE\.md(.{0,4})", text):
            if not match.group(1).startswith((', "', ' ("')):
                bare.append(f"{path.relative_to(REPO)}: {match.group(0)}")
    assert bare == []


def _sh_commands(doc: Path) -> list[list[str]]:
    """The simple commands of the doc's fenced `sh` blocks, as words."""
    commands = []
    for language, block in FENCE.findall(doc.read_text(encoding="utf-8")):
        if language != "sh":
            continue
        block = re.sub(r"<<'(\w+)'\n.*?\n\1\n", "\n", block, flags=re.S)  # here-documents
        block = block.replace("\\\n", " ")
        for line in block.splitlines():
            line = re.sub(r"(^|\s)#.*", "", line)
            for part in re.split(r"&&|\|\||;|\|", line):
                words = shlex.split(part) if part.strip() else []
                if words:
                    commands.append(words)
    return commands


def _prompt_worker_words(words: list[str]) -> list[str] | None:
    """The arguments of a `prompt-worker` command line, or None when it is not one."""
    if words[0] in PROMPT_WORKER:
        return words[1:]
    if words[:3] in (["python", "-m", "worker"], [".venv/bin/python", "-m", "worker"]):
        return words[3:]
    if words[0] == "scripts/serve":
        return ["serve", *words[1:]]
    if words[:2] == ["docker", "run"] and "build-prompt-worker" in words:
        # The image's entrypoint is `prompt-worker serve`; what follows goes to it.
        return ["serve", *words[words.index("build-prompt-worker") + 1 :]]
    return None


def _refused_by_the_cli(arguments: list[str]) -> bool:
    try:
        build_parser(arguments).parse_args(arguments)
    except SystemExit as exit:
        return exit.code != 0
    return False


@pytest.mark.parametrize("name", ["README.md", "docs/OPERATIONS.md"])
def test_every_command_shown_names_a_script_or_flag_that_exists(name: str) -> None:
    commands = _sh_commands(REPO / name)
    assert commands
    wrong = []
    for words in commands:
        if words[0].startswith(("scripts/", "bench/")) and not (REPO / words[0]).is_file():
            wrong.append(" ".join(words))
        arguments = _prompt_worker_words(words)
        if arguments is not None and "--help" not in arguments and _refused_by_the_cli(arguments):
            wrong.append(" ".join(words))
        for word in words[1:]:
            if word.startswith(REPO_DIRS) and not (REPO / word).exists():
                wrong.append(f"{' '.join(words)}: {word}")
    assert wrong == []


def test_the_command_check_catches_a_flag_that_does_not_exist() -> None:
    assert _refused_by_the_cli(["replay-dead", "--dry-run", "--bogus"])
    assert _refused_by_the_cli(["no-such-command"])
    assert not _refused_by_the_cli(["replay-dead", "--dry-run"])


@pytest.mark.parametrize(
    ("written", "head"),
    [("results.md", "| target | measured | |"), ("before_after.md", "| | before (`")],
)
def test_the_performance_tables_are_the_ones_bench_run_wrote(written: str, head: str) -> None:
    text = (REPO / "docs" / "PERFORMANCE.md").read_text(encoding="utf-8")
    shown = text.split(f"<!-- bench/{written} begins -->\n", 1)[1]
    shown = shown.split(f"<!-- bench/{written} ends -->", 1)[0]
    assert shown.strip() == (REPO / "bench" / written).read_text(encoding="utf-8").strip()
    assert head in shown


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
