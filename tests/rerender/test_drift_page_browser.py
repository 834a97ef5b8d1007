"""The drift page in a real browser: Debian's Chromium, headless, through Playwright.

Pages come from real re-render runs (tests/rerender/runs.py: the conformance cases
after a template edit, with errors and bad lines). Each test saves screenshots in its
temporary directory (and in $PROMPT_WORKER_TEST_ARTEFACTS/drift-page when set, for CI).
Without Chromium these tests skip, except under CI=true, where they fail.
"""

import json
import re
from typing import Any

from tests.rerender.conftest import Browser
from tests.rerender.runs import EDIT_AFTER, EDIT_BEFORE, HOSTILE, Run

ReviewRun = tuple[Run, dict[str, Any]]


def card(page: Any, name: str) -> int:
    return int(page.text_content(f"#card-{name} .value").replace(",", ""))


def list_keys(page: Any) -> list[str]:
    """The keys of the list rows drawn right now (the list is virtual)."""
    keys: list[str] = page.eval_on_selector_all(
        "#list .row", "rows => rows.map(r => r.dataset.key)"
    )
    return keys


def selected(page: Any) -> str:
    key: str = page.get_attribute("#list .row[aria-selected='true']", "data-key")
    return key


def page_changes(run: Run) -> list[dict[str, Any]]:
    text = run.html.read_text(encoding="utf-8")
    match = re.search(r'id="drift-data">(.*?)</script>', text, re.S)
    assert match is not None
    changes: list[dict[str, Any]] = json.loads(match.group(1))["changes"]
    return changes


def test_the_summary_shows_the_runs_numbers(browser: Browser, review_run: ReviewRun) -> None:
    run, _ = review_run
    totals = run.report["totals"]
    page = browser.open(run.html)
    assert card(page, "jobs") == totals["records"] - totals["bad_lines"]
    assert card(page, "same") == totals["drift"]["same"]
    assert card(page, "changed") == totals["drift"]["changed"]
    assert card(page, "errors") == totals["error"] - totals["bad_lines"]
    assert card(page, "bad") == totals["bad_lines"] == 3
    # By kind: the table's row for react, and one bar of the chart per kind.
    # The table counts jobs, as the cards do: the report's react row less line 32, a
    # bad line (a react job whose prior messages cannot be read).
    react = dict(run.report["by_kind"]["react"])
    react["records"] -= 1
    react["error"] -= 1
    cells = page.eval_on_selector_all(
        "#kinds tr[data-kind='react'] td", "cells => cells.map(c => c.textContent)"
    )
    assert cells[:4] == [str(react["records"]), str(react["drift_same"]),
                         str(react["drift_changed"]), str(react["error"])]  # fmt: skip
    # Template before and after: the edit moved the tarsy family's version.
    before, after = cells[5], cells[6]
    assert before.startswith("tarsy-") and after == run.version_after and before != after
    assert (
        page.get_attribute("#kinds tr[data-kind='react'] td:last-child", "class") == "version moved"
    )
    bars = page.eval_on_selector_all("#chart .bar", "bars => bars.map(b => b.dataset.kind)")
    assert sorted(bars) == sorted(run.report["by_kind"])
    assert page.text_content("#files").endswith("complete run")
    # The new prompts' cacheable share (meta.cache), summed over the run.
    cacheable = totals["cacheable"]
    shown = re.fullmatch(
        r"Cacheable prefix: ([\d.]+)% of the new prompts' ([\d,]+) tokens \(meta\.cache\)\.",
        page.text_content("#summary-section p.cacheable") or "",
    )
    assert shown is not None, page.text_content("#summary-section p.cacheable")
    assert int(shown.group(2).replace(",", "")) == cacheable["prompt_tokens"]
    share = 100 * cacheable["stable_tokens"] / cacheable["prompt_tokens"]
    assert abs(float(shown.group(1)) - share) <= 0.05
    browser.screenshot(page, "summary", full_page=True)
    assert browser.requests == [run.html.as_uri()]  # nothing loaded from anywhere else
    assert browser.errors == []
    page.close()


def test_a_change_opens_as_a_word_level_diff_in_both_views(
    browser: Browser, review_run: ReviewRun
) -> None:
    run, _ = review_run
    page = browser.open(run.html)
    page.evaluate("document.getElementById('review').scrollIntoView()")
    synthesis = next(c for c in page_changes(run) if c["kind"] == "synthesis" and c["removed"] == 1)
    page.click(f"#list .row[data-key='change:{synthesis['id']}']")
    assert page.url.endswith(f"#change={synthesis['id']}")
    assert page.text_content("#detail h2").startswith("Change synthesis")
    assert f"{synthesis['jobs']} jobs made this change" in page.text_content("#detail .meta")
    # The example job's cacheable prefix, message by message.
    cacheable = page.text_content("#detail p.cacheable") or ""
    assert cacheable.startswith("Cacheable prefix of the new prompt: ")
    parts = cacheable.removeprefix("Cacheable prefix of the new prompt: ").split(" · ")
    assert len(parts) == len(synthesis["cacheable"]) >= 2
    for index, (part, message) in enumerate(zip(parts, synthesis["cacheable"], strict=True)):
        numbers = re.fullmatch(r"(\d+) (\w+) ([\d,]+) of ([\d,]+) characters \(([\d.]+)%\)", part)
        assert numbers is not None, part
        assert (int(numbers.group(1)), numbers.group(2)) == (index, message["role"])
        assert int(numbers.group(3).replace(",", "")) == message["cacheable"]
        assert int(numbers.group(4).replace(",", "")) == message["chars"]
    # Unified: the removed and the added line, the changed words marked inside them.
    removed = page.text_content("#diff .unified .t.del")
    added = page.text_content("#diff .unified .t.ins")
    assert (removed, added) == (EDIT_BEFORE, EDIT_AFTER)
    marked_old = page.eval_on_selector_all("#diff del.w", "w => w.map(e => e.textContent)")
    marked_new = page.eval_on_selector_all("#diff ins.w", "w => w.map(e => e.textContent)")
    assert marked_old == [", reference actual", "provide"]
    assert marked_new == [": quote the", " you rely on", "end with"]
    # The same change in the other kinds it touched is one click away.
    also = page.eval_on_selector_all("#detail .also a", "a => a.map(e => e.textContent)")
    assert sorted(a.split(" ")[0] for a in also) == ["native_thinking", "react"]
    browser.screenshot(page, "diff-unified")
    # Unchanged stretches are folded; unfolding shows them with their line numbers.
    rows_before = page.locator("#diff .r").count()
    fold = page.locator("#diff button.fold").first
    shown = re.search(r"Show (\d+) unchanged", fold.text_content())
    assert shown is not None
    count = int(shown.group(1))
    fold.click()
    assert page.locator("#diff .r").count() == rows_before + count
    first_numbers = page.eval_on_selector_all(
        "#diff .r .n", "cells => cells.slice(0, 4).map(c => c.textContent)"
    )
    assert first_numbers == ["1", "1", "2", "2"]
    # Side by side: before on the left, after on the right, in one row.
    page.click("#view-split")
    assert page.get_attribute("#view-split", "aria-pressed") == "true"
    assert page.url.endswith("&view=split")
    row = page.locator("#diff .split .r:has(.t.del)").first
    assert row.locator(".t.del").text_content() == EDIT_BEFORE
    assert row.locator(".t.ins").text_content() == EDIT_AFTER
    browser.screenshot(page, "diff-split")
    assert browser.errors == []
    page.close()


def test_filters_by_kind_and_status_and_the_error_and_bad_line_views(
    browser: Browser, review_run: ReviewRun
) -> None:
    run, facts = review_run
    page = browser.open(run.html)
    page.select_option("#kind", "native_thinking")
    keys = list_keys(page)
    native = [c["id"] for c in page_changes(run) if c["kind"] == "native_thinking"]
    assert keys == [f"change:{i}" for i in native]
    assert "of kind native_thinking" in page.text_content("#status-line")
    page.select_option("#kind", "")
    # Changes hidden: the errors, then the bad lines.
    page.click("#statuses [data-status='changed']")
    keys = list_keys(page)
    assert all(not k.startswith("change:") for k in keys)
    assert [k for k in keys if k.startswith("bad:")] == [f"bad:{n}" for n in facts["bad_lines"]]
    assert len([k for k in keys if k.startswith("error:")]) == 3
    page.click("#list .row[data-key^='error:']")
    detail = page.text_content("#detail")
    assert "invalid_job" in detail and "did not render" in detail
    assert "job failed validation (1 problem): kind: Input should be" in detail
    assert "gone-kind-1" in page.text_content("#detail .job-list")
    browser.screenshot(page, "errors")
    page.click("#list .row[data-key='bad:6']")
    assert "Bad input line 6" in page.text_content("#detail h2")
    assert page.text_content("#detail pre.message").startswith("not valid JSON")
    assert "{not json" in page.text_content("#detail")
    # Errors hidden too: bad lines only.
    page.click("#statuses [data-status='error']")
    assert list_keys(page) == [f"bad:{n}" for n in facts["bad_lines"]]
    browser.screenshot(page, "bad-lines")
    assert browser.errors == []
    page.close()


def test_search_by_job_id(browser: Browser, review_run: ReviewRun) -> None:
    run, facts = review_run
    page = browser.open(run.html)
    page.fill("#search", facts["hand_edited"])
    page.press("#search", "Enter")
    (key,) = list_keys(page)
    assert selected(page) == key
    assert page.text_content("#detail .job.match").endswith(facts["hand_edited"])
    rows = page.eval_on_selector_all("#diff .t.del", "r => r.map(e => e.textContent)")
    assert "A LINE THAT WAS SENT" in rows
    assert page.url.endswith(f"&job={facts['hand_edited']}")
    browser.screenshot(page, "search")
    # A part of an id finds every group holding a match.
    page.fill("#search", "gone-kind")
    page.press("#search", "Enter")
    assert [k.split(":")[0] for k in list_keys(page)] == ["error"]
    page.fill("#search", "no-such-job")
    page.press("#search", "Enter")
    assert list_keys(page) == []
    assert page.text_content("#status-line").startswith("No listed job id contains “no-such-job”")
    # Escape clears the search.
    page.press("#search", "Escape")
    assert page.input_value("#search") == "" and len(list_keys(page)) > 5
    assert browser.errors == []
    page.close()


def test_hostile_job_text_is_shown_as_text(browser: Browser, review_run: ReviewRun) -> None:
    run, facts = review_run
    page = browser.open(run.html, f"#job={facts['hostile']}")
    assert page.evaluate("window.__xss") is None
    assert page.locator("img").count() == 0
    assert facts["hostile"] in page.text_content("#detail")
    rows = page.eval_on_selector_all("#diff .t.del", "r => r.map(e => e.textContent)")
    assert any(row.endswith(HOSTILE) for row in rows)
    page.click("#view-split")
    assert page.evaluate("window.__xss") is None and page.locator("img").count() == 0
    browser.screenshot(page, "hostile")
    assert browser.errors == []
    page.close()


def test_keyboard_and_deep_links(browser: Browser, review_run: ReviewRun) -> None:
    run, facts = review_run
    changes = page_changes(run)
    hand = next(c for c in changes if c["ids"][0][1] == facts["hand_edited"])
    page = browser.open(run.html, f"#change={hand['id']}&view=split")
    assert selected(page) == f"change:{hand['id']}"
    assert page.get_attribute("#view-split", "aria-pressed") == "true"
    page.focus("#list")
    page.keyboard.press("j")
    after_j = selected(page)
    assert after_j != f"change:{hand['id']}" and after_j.startswith("change:")
    page.keyboard.press("k")
    assert selected(page) == f"change:{hand['id']}"
    page.keyboard.press("v")
    assert page.get_attribute("#view-unified", "aria-pressed") == "true"
    page.keyboard.press("n")
    assert page.locator("#diff .hunk-start.current").count() == 1
    page.keyboard.press("e")
    assert page.locator("#diff button.fold").count() == 0
    page.keyboard.press("3")  # hide the bad lines
    assert page.get_attribute("#statuses [data-status='bad']", "aria-pressed") == "false"
    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.id") == "search"
    page.keyboard.press("Escape")
    page.focus("#list")
    page.keyboard.press("?")
    assert page.evaluate("document.getElementById('help').open") is True
    browser.screenshot(page, "keys")
    page.keyboard.press("Escape")
    assert page.evaluate("document.getElementById('help').open") is False
    # A link to an error opens it even when the filters would hide it.
    error_id = page.get_attribute("#list .row[data-key^='error:']", "data-key").split(":", 1)[1]
    page.click("#statuses [data-status='error']")
    page.evaluate(f"location.hash = '#error={error_id}'")
    page.wait_for_function(
        f"document.querySelector('#list .row[aria-selected=true]')?.dataset.key === 'error:{error_id}'"
    )
    assert page.get_attribute("#statuses [data-status='error']", "aria-pressed") == "true"
    assert browser.errors == []
    page.close()


def test_long_lists_draw_only_the_rows_on_screen(browser: Browser, many_changes_run: Run) -> None:
    run = many_changes_run
    page = browser.open(run.html)
    assert card(page, "changed") == 1200
    total = page.evaluate("document.querySelector('#list .vl-inner').offsetHeight")
    drawn = len(list_keys(page))
    assert total >= 1200 * 54 and 5 < drawn < 60
    page.eval_on_selector("#list", "l => { l.scrollTop = l.scrollHeight; }")
    page.wait_for_timeout(100)
    last = page_changes(run)[-1]["id"]
    keys = list_keys(page)
    assert f"change:{last}" == keys[-1] and len(keys) < 60
    page.keyboard.press("End")
    page.keyboard.press("Home")
    assert selected(page) == list_keys(page)[0]
    browser.screenshot(page, "many-changes")
    assert browser.errors == []
    page.close()


def test_readable_on_a_small_screen_and_in_dark_mode(
    browser: Browser, review_run: ReviewRun
) -> None:
    run, _ = review_run
    page = browser.open(run.html, width=820, height=1000)
    page.emulate_media(color_scheme="dark")
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(13, 17, 23)"
    # One column: the list above the detail, nothing wider than the screen.
    list_box = page.locator("#list").bounding_box()
    detail_box = page.locator("#detail").bounding_box()
    assert list_box["y"] + list_box["height"] <= detail_box["y"]
    assert page.evaluate("document.documentElement.scrollWidth") <= 820
    browser.screenshot(page, "narrow-dark", full_page=True)
    assert browser.errors == []
    page.close()
