"""Fixtures of the rerender tests: real runs with a template edit, and the browser."""

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.rerender.runs import Run, conformance_cases, rerender_with_edit, review_lines, sent_meta
from tests.unavailable import missing

CHROMIUM = Path(os.environ.get("PROMPT_WORKER_CHROMIUM", "/usr/bin/chromium"))
# Flags for a closed network: without them Chromium keeps trying to reach its services.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Where screenshots are kept beyond the test's temporary directory (a CI artefact).
ARTEFACTS_ENV = "PROMPT_WORKER_TEST_ARTEFACTS"


@pytest.fixture(scope="session")
def review_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, dict[str, Any]]:
    """The conformance cases after the template edit, with errors and bad lines."""
    lines, facts = review_lines()
    return rerender_with_edit(tmp_path_factory.mktemp("review"), lines), facts


@pytest.fixture(scope="session")
def many_changes_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """1,200 changed jobs, each with a change of its own (a line only it had)."""
    cases = [case for case in conformance_cases() if case["job"]["kind"] == "react"]
    lines = []
    for n in range(1200):
        case = json.loads(json.dumps(cases[n % len(cases)]))
        case["job"]["job_id"] = f"many-{n:05d}"
        case["expected_messages"][0]["content"] += f"\nA note only job {n} had."
        lines.append(json.dumps({**case, "meta": sent_meta(case)}))
    return rerender_with_edit(tmp_path_factory.mktemp("many"), lines)


class Browser:
    """Headless Chromium (the system's, through Playwright) with a fresh profile."""

    def __init__(self, context: Any, shots: Path) -> None:
        self.context = context
        self.shots = shots
        self.errors: list[str] = []
        self.requests: list[str] = []

    def open(self, html: Path, fragment: str = "", **viewport: int) -> Any:
        """A new tab on `html`, once its script has drawn it; errors and requests of
        this tab only are collected from here on."""
        self.errors, self.requests = [], []
        page = self.context.new_page()
        if viewport:
            page.set_viewport_size({"width": viewport["width"], "height": viewport["height"]})
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        page.on(
            "console", lambda msg: self.errors.append(msg.text) if msg.type == "error" else None
        )
        page.on("request", lambda request: self.requests.append(request.url))
        page.goto(html.as_uri() + fragment)
        page.wait_for_selector("body[data-ready='1']", timeout=15_000)
        return page

    def screenshot(self, page: Any, name: str, **options: Any) -> Path:
        path = self.shots / f"{name}.png"
        page.screenshot(path=str(path), **options)
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        artefacts = os.environ.get(ARTEFACTS_ENV)
        if artefacts:
            target = Path(artefacts) / "drift-page"
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, target / path.name)
        return path


def _launch_or_skip() -> Any:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("playwright", "scripts/ensure-venv installs the test extras")
    if not CHROMIUM.exists():
        missing(str(CHROMIUM), "scripts/ensure-chromium installs it")
    return sync_playwright


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    sync_playwright = _launch_or_skip()
    shots = tmp_path_factory.mktemp("screenshots")
    with sync_playwright() as playwright, tempfile.TemporaryDirectory() as profile:
        context = playwright.chromium.launch_persistent_context(
            profile,
            executable_path=str(CHROMIUM),
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1440, "height": 900},
        )
        try:
            yield Browser(context, shots)
        finally:
            context.close()
