"""The fleet page (`report --from-archive`) in a real browser: Debian's Chromium,
headless, through Playwright, as the drift page's tests run it. The page is made by
the real command from records on a stream of the test's own. Without Chromium these
tests skip, except under CI=true, where they fail.
"""

import asyncio
import datetime
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.archive.streams import archive_stream, error_record_of, publish, record_of
from tests.cli import prompt_worker
from tests.rerender.conftest import Browser
from tests.rerender.runs import HOSTILE, conformance_cases
from tests.unavailable import AMQP_URL

pytestmark = pytest.mark.broker

BUDGET = {
    "max_prompt_tokens": 4000, "tokenizer": "estimate", "prompt_tokens": 3990,
    "counted": True, "trimmed": True,
    "elisions": [{"section": "stage.previous_stage_events", "items": 3, "chars": 900, "tokens": 225}],
}  # fmt: skip


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """The page of 40 records: masked values, a trimmed job, errors, hostile text."""
    cases = [c for c in conformance_cases() if c["job"]["kind"] in ("react", "synthesis")][:36]
    records = []
    for n, case in enumerate(cases):
        meta: dict[str, Any] = {
            "masked": {"aws_access_key": n % 3, "password": 1},
            "cache": {"stable_tokens": 600 + n, "prompt_tokens": 1000},
        }
        if n == 4:
            meta["budget"] = BUDGET
        records.append(record_of(case, **meta))
    hostile = json.loads(json.dumps(cases[0]["job"]))
    hostile["job_id"] = "hostile"
    hostile["session"]["session_id"] = HOSTILE
    records.append(record_of({"job": hostile, "expected_messages": [
        {"role": "user", "content": HOSTILE}]}))  # fmt: skip
    for n in range(3):
        job = {**cases[n]["job"], "job_id": f"failed-{n}"}
        records.append(error_record_of(job, "invalid_job" if n else "render_failed", "why"))
    page = tmp_path_factory.mktemp("fleet") / "fleet.html"
    two_hours_ago = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=2)
    earlier = [record_of(case, two_hours_ago.timestamp()) for case in cases[:4]]
    with archive_stream("page") as stream:
        asyncio.run(publish(stream, earlier, when=two_hours_ago))
        asyncio.run(publish(stream, records))
        result = prompt_worker(
            "report", "--from-archive", AMQP_URL, "--archive-stream", stream,
            "--since", "3h", "--html", str(page), "--progress", "off",
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().startswith(f"fleet page: {page} (")
    return page, earlier + records


# `fleet` before `browser` in each test: the page is made before Playwright's loop runs.


def card(page: Any, name: str) -> str:
    text: str = page.text_content(f"#card-{name} .value")
    return text


def table(page: Any, name: str) -> dict[str, list[str]]:
    rows = page.eval_on_selector_all(
        f"#{name} tbody tr", "rows => rows.map(r => [...r.cells].map(c => c.textContent))"
    )
    return {row[0]: row[1:] for row in rows}


def test_the_summary_and_tables_count_what_was_recorded(
    fleet: tuple[Path, list[dict[str, Any]]], browser: Browser
) -> None:
    html, records = fleet
    page = browser.open(html)
    sessions = {(r["job"].get("session") or {}).get("session_id") for r in records}
    assert card(page, "jobs") == str(len(records))
    assert card(page, "errors") == "3"
    assert card(page, "sessions") == str(len(sessions))
    assert card(page, "trimmed") == "1 of 1 budgeted"
    assert table(page, "errors") == {"invalid_job": ["2"], "render_failed": ["1"]}
    stable = sum(600 + n for n in range(36))
    assert card(page, "cacheable") == f"{100 * round(stable / 36_000, 3):.1f}%"
    masked: Counter[str] = Counter()
    for r in records:
        masked.update(r.get("meta", {}).get("masked", {}))
    assert table(page, "masked") == {k: [f"{v:,}"] for k, v in masked.items() if v}
    assert table(page, "elisions") == {"stage.previous_stage_events": ["1"]}
    kinds = Counter(r["kind"] for r in records)
    assert {k: int(v[0]) for k, v in table(page, "kinds").items()} == dict(kinds)
    bars = page.eval_on_selector_all(
        "#timeline rect",
        "rs => rs.map(r => [r.getAttribute('x'), r.dataset.name, Number(r.dataset.count)])",
    )
    # Two hours in 5-minute bars: the earlier records' bar, then the later ones' about
    # 24 bars to the right (where the hour falls between 5-minute marks moves it by one).
    # The chart is 760 wide: the last bar's slot n puts it at n × 760 / (n + 1).
    xs = sorted({float(x) for x, _, _ in bars})
    assert len(xs) == 2 and xs[0] == 1.0
    last_slot = (xs[1] - 1) / (760 - (xs[1] - 1))
    assert round(last_slot) in (23, 24, 25) and abs(last_slot - round(last_slot)) < 1e-6
    drawn: Counter[str] = Counter()
    for _, name, count in bars:
        drawn[name] += count
    assert drawn == kinds
    page.select_option("#series", "families")
    families = page.eval_on_selector_all("#timeline rect", "rs => rs.map(r => r.dataset.name)")
    # An error's record has no reply meta, and these no family header: "(unknown)".
    assert sorted(set(families)) == ["(unknown)", "tarsy"]
    assert browser.errors == [] and all(url.startswith("file:") for url in browser.requests)
    browser.screenshot(page, "fleet-summary", full_page=True)


def test_a_click_on_a_session_shows_its_prompts_as_text(
    fleet: tuple[Path, list[dict[str, Any]]], browser: Browser
) -> None:
    html, records = fleet
    page = browser.open(html)
    assert page.text_content("#session") == ""
    page.click(f"#sessions button[data-session='{HOSTILE}']".replace("'", "\\'", 0))
    shown = page.eval_on_selector_all("#session pre", "ps => ps.map(p => p.textContent)")
    assert shown == [HOSTILE]
    assert page.evaluate("window.__xss") is None
    # A session with several jobs: every prompt of it, each message in order.
    session = records[0]["job"]["session"]["session_id"]
    page.click(f"#sessions button[data-session='{session}']")
    mine = [r for r in records if r["job"].get("session", {}).get("session_id") == session]
    shown = page.eval_on_selector_all("#session pre", "ps => ps.map(p => p.textContent)")
    assert shown == [m["content"] for r in mine for m in r.get("messages", [])]
    assert (
        page.get_attribute(f"#sessions button[data-session='{session}']", "aria-pressed") == "true"
    )
    assert browser.errors == []
    browser.screenshot(page, "fleet-session")
