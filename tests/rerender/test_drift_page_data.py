"""The drift page's content, from real re-render runs: counts, grouping, limits, safety.

What the browser shows of it is tested in test_drift_page_browser.py.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.data import REPO
from tests.rerender.files import CONFIG
from tests.rerender.runs import (
    EDIT_AFTER,
    EDIT_BEFORE,
    HOSTILE,
    Run,
    conformance_cases,
    sent_meta,
)
from worker.cli import main
from worker.rerender.page.changes import describe_change, message_changes, word_pieces
from worker.rerender.page.drift_page import content_security_policy, render_page, script_safe_json
from worker.rerender.page.page_data import PageError, PageLimits, collect

ReviewRun = tuple[Run, dict[str, Any]]


def page_data(html: Path) -> dict[str, Any]:
    """The data embedded in a page, read back as the page's script reads it."""
    text = html.read_text(encoding="utf-8")
    match = re.search(r'<script type="application/json" id="drift-data">(.*?)</script>', text, re.S)
    assert match is not None
    data: dict[str, Any] = json.loads(match.group(1))
    return data


def messages(*contents: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": text} for text in contents]


# -- what a change is -----------------------------------------------------------------


def test_the_same_edit_in_different_messages_is_one_change() -> None:
    def prompt(job: str, line: str) -> str:
        return f"You help with {job}.\nintro\n{line}\nTools for {job}:\n- a\n- b"

    one = message_changes(
        messages(prompt("job 1", "old rule")), messages(prompt("job 1", "new rule"))
    )
    two = message_changes(
        messages(prompt("another job", "old rule") + "\nmore"),
        messages(prompt("another job", "new rule") + "\nmore"),
    )
    other = message_changes(messages(prompt("job 1", "old rule")), messages(prompt("job 1", "NEW")))
    signature = describe_change(one, 1000).signature
    assert describe_change(two, 1000).signature == signature
    assert describe_change(other, 1000).signature != signature
    # A lost trailing newline is a change of its own.
    eol = message_changes(messages("a\nb\n"), messages("a\nb"))
    assert (
        describe_change(eol, 1000).signature
        != describe_change(message_changes(messages("a\nb"), messages("a\nb\n")), 1000).signature
    )


def test_a_diff_folds_unchanged_stretches_around_the_changes() -> None:
    before = "\n".join(f"line {n}" for n in range(1, 21))
    after = before.replace("line 10", "line ten")
    (change,) = describe_change(message_changes(messages(before), messages(after)), 10_000).example
    assert change["index"] == 0 and change["before"] == change["after"] == "system"
    assert change["rows"] == [
        ["~", 6, "line 1\nline 2\nline 3\nline 4\nline 5\nline 6"],
        ["=", "line 7"],
        ["=", "line 8"],
        ["=", "line 9"],
        ["-", "line 10", ["line ", "10"], 0],
        ["+", "line ten", ["line ", "ten"], 0],
        ["=", "line 11"],
        ["=", "line 12"],
        ["=", "line 13"],
        ["~", 7, "line 14\nline 15\nline 16\nline 17\nline 18\nline 19\nline 20"],
    ]


def test_word_pieces_mark_what_changed_inside_a_line() -> None:
    assert word_pieces("the alert fired", "the alert has fired") == (
        ["the alert ", "", "fired"],
        ["the alert ", "has ", "fired"],
    )
    assert word_pieces("x = 1;", "x = 2;") == (["x = ", "1", ";"], ["x = ", "2", ";"])
    # Unrelated lines: highlighting every word would say nothing.
    assert word_pieces("completely different words", "nothing alike here at all") is None


def test_a_small_budget_keeps_the_changed_lines_and_drops_folded_text() -> None:
    before = "\n".join(f"unchanged context line {n}" for n in range(200))
    after = before.replace("line 100", "line one hundred")
    described = describe_change(message_changes(messages(before), messages(after)), 400)
    rows = described.example[0]["rows"]
    assert ["-", "unchanged context line 100", ["unchanged context line ", "100"], 0] in rows
    assert [r[0] for r in rows].count("~") == 2
    assert all(row[2] is None for row in rows if row[0] == "~")
    assert described.example_cut and described.example_chars <= 400


def test_a_line_longer_than_the_budget_is_cut_and_says_how_long_it_was() -> None:
    described = describe_change(message_changes(messages("a"), messages("b" * 5000)), 100)
    rows = described.example[0]["rows"]
    assert rows[0] == ["-", "a", 0, 1]
    assert rows[1] == ["+", "b" * 99, 0, 1, 5000]


# -- the page of a real run -------------------------------------------------------------


def test_the_page_counts_are_the_drift_reports(review_run: ReviewRun) -> None:
    run, facts = review_run
    assert run.exit_code == 1  # the run had errors and bad lines
    data = page_data(run.html)
    report = run.report
    assert data["totals"] == report["totals"]
    # By kind, the page counts jobs as its header does: the report's rows less the bad
    # lines (lines 6 and 31 have no kind, line 32 is a react job with unreadable
    # messages; the two jobs of a kind that no longer exists stay).
    expected = {kind: dict(row) for kind, row in report["by_kind"].items()}
    expected["(unknown)"]["records"] -= 2
    expected["(unknown)"]["error"] -= 2
    for column in ("records", "error", "drift_error"):
        expected["react"][column] -= 1
    assert data["by_kind"] == expected
    totals = data["totals"]
    assert sum(row["records"] for row in data["by_kind"].values()) == (
        totals["records"] - totals["bad_lines"]
    )
    assert data["errors_by_code"] == report["errors_by_code"]
    assert data["lines"] == sum(1 for _ in run.input.open("rb"))
    assert data["partial"] is False and data["notes"] == []
    # Errors apart from bad lines, by code.
    assert data["job_errors_by_code"] == {"invalid_job": len(facts["error_ids"])}
    assert [b["line"] for b in data["bad_lines"]] == facts["bad_lines"]
    assert [b["code"] for b in data["bad_lines"]] == ["invalid_json", "invalid_job", "invalid_job"]


def test_one_template_edit_is_one_change_per_kind(review_run: ReviewRun) -> None:
    run, facts = review_run
    data = page_data(run.html)
    changed: dict[str, list[str]] = {}
    for line in run.output.read_text(encoding="utf-8").splitlines():
        record = json.loads(line) if line else {}
        if record.get("drift") == "changed":
            changed.setdefault(record["kind"], []).append(record["job_id"])
    edit = {"roles": ["system"], "minus": EDIT_BEFORE, "plus": EDIT_AFTER}
    by_edit = [c for c in data["changes"] if c["summary"] == edit and c["removed"] == 1]
    # Every kind the edit touched has exactly one group for it...
    assert sorted(c["kind"] for c in by_edit) == sorted(changed)
    assert len({c["signature"] for c in by_edit}) == 1
    # ...which lists every changed job of that kind but the two with changes of their own.
    own = {facts["hand_edited"], facts["hostile"]}
    for change in by_edit:
        ids = [job_id for _, job_id in change["ids"]]
        assert ids == [i for i in changed[change["kind"]] if i not in own]
        assert change["jobs"] == len(ids)
        assert (change["messages"], change["added"]) == (1, 1)
    assert sum(c["jobs"] for c in data["changes"]) == run.report["totals"]["drift"]["changed"]
    (hand,) = [c for c in data["changes"] if [i for _, i in c["ids"]] == [facts["hand_edited"]]]
    assert hand["summary"]["minus"] == EDIT_BEFORE
    # The edited line; and in the user message, the last line (it had a newline then)
    # and the line sent after it.
    assert (hand["messages"], hand["removed"], hand["added"]) == (2, 3, 2)
    rows = [row for message in hand["diff"] for row in message["rows"]]
    assert ["-", "A LINE THAT WAS SENT", 0, 1] in rows


def test_template_versions_before_and_after(review_run: ReviewRun) -> None:
    run, _ = review_run
    data = page_data(run.html)
    after = {(v["kind"], v["template_version"]) for v in data["versions"]["after"]}
    before = {(v["kind"], v["template_version"]) for v in data["versions"]["before"]}
    tarsy_before = sent_meta({"job": {"kind": "react"}})["template_version"]
    assert ("react", run.version_after) in after and ("react", tarsy_before) in before
    assert run.version_after != tarsy_before
    assert {v for k, v in after if k == "skill_react"} == {
        v for k, v in before if k == "skill_react"
    }
    assert sum(v["records"] for v in data["versions"]["after"]) == run.report["totals"]["ok"]


def test_errors_are_grouped_by_kind_code_and_message(review_run: ReviewRun) -> None:
    run, facts = review_run
    errors = page_data(run.html)["errors"]
    assert [(e["kind"], e["code"], [i for _, i in e["ids"]]) for e in errors] == [
        ("(unknown)", "invalid_job", ["gone-kind-1", "gone-kind-2"]),
        ("react", "invalid_job", ["bad-stage-1"]),
        ("react", "invalid_job", ["bad-tools-1"]),
    ]
    by_id = {e["ids"][0][1]: e for e in errors}
    assert set(by_id) == {"gone-kind-1", "bad-stage-1", "bad-tools-1"}
    # The validation details name the field: the worker's message alone would not.
    assert by_id["gone-kind-1"]["message"].startswith(
        "job failed validation (1 problem): kind: Input should be "
    )
    assert by_id["bad-stage-1"]["message"] == (
        "job failed validation (1 problem): stage: Input should be a valid dictionary "
        "or instance of Stage"
    )
    assert by_id["bad-tools-1"]["message"] == (
        "job failed validation (1 problem): tools: Input should be a valid list"
    )
    assert {i for e in errors for _, i in e["ids"]} == facts["error_ids"]
    assert by_id["gone-kind-1"]["jobs"] == 2


def test_report_builds_the_same_page_later(review_run: ReviewRun, tmp_path: Path) -> None:
    run, _ = review_run
    later = tmp_path / "later.html"
    assert main(["report", str(run.input), str(run.output), "--html", str(later)]) == 0
    assert later.read_bytes() == run.html.read_bytes()


def test_job_text_cannot_break_out_of_the_page(review_run: ReviewRun) -> None:
    run, facts = review_run
    text = run.html.read_text(encoding="utf-8")
    assert HOSTILE not in text and "<img" not in text and "<!--" not in text
    # Exactly the page's own two script elements and its one style element.
    assert text.count("<script") == 2 and text.count("</script>") == 2
    assert text.count("<style") == 1
    # ...and yet the data holds the text as it was, for the script to show as text.
    data = page_data(run.html)
    assert facts["hostile"] in {job_id for c in data["changes"] for _, job_id in c["ids"]}
    # Nothing is loaded from anywhere: no external resources, a policy that forbids them.
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)
    assert "<link" not in text and "@import" not in text
    css_js = re.findall(r"<style>(.*?)</style>.*<script>(.*?)</script>", text, re.S)
    (css, js) = css_js[0]
    assert f'content="{content_security_policy(css, js)}"' in text
    assert "default-src 'none'" in text


def test_script_safe_json_escapes_what_could_end_the_element() -> None:
    value = {"t": "</script><!-- & \u2028\u2029 >"}
    encoded = script_safe_json(value)
    assert not re.search(rb"[<>&]|\xe2\x80[\xa8\xa9]", encoded)
    assert json.loads(encoded) == value


def test_limits_bound_the_page_and_the_notes_say_what_was_left_out(
    many_changes_run: Run,
) -> None:
    limits = PageLimits(
        changes=50, ids_per_group=1, ids_total=30, example_chars=2_000, page_example_chars=20_000
    )
    data = collect(many_changes_run.input, many_changes_run.output, limits)
    changed = many_changes_run.report["totals"]["drift"]["changed"]
    assert changed == 1200
    assert len(data["changes"]) == 50
    assert data["unlisted"]["changed"] == {"react": 1150}
    assert sum(len(c["ids"]) for c in data["changes"]) == 30
    assert data["unlisted"]["ids"] == 20
    with_diff = [c for c in data["changes"] if c["diff"] is not None]
    assert 0 < len(with_diff) < 50 and data["unlisted"]["diffs"] == 50 - len(with_diff)
    notes = "\n".join(data["notes"])
    assert "1,150 changed jobs made changes beyond the first 50 distinct ones" in notes
    assert "Job ids: 20 are not listed" in notes
    assert f"{50 - len(with_diff)} changes are shown without their diff" in notes
    assert len(render_page(data)) < 200_000
    # The defaults hold all 1,200 distinct changes of this run.
    full = page_data(many_changes_run.html)
    assert len(full["changes"]) == 1200 and full["notes"] == []


def test_an_interrupted_run_makes_a_partial_page(review_run: ReviewRun, tmp_path: Path) -> None:
    run, _ = review_run
    lines = run.output.read_bytes().splitlines(keepends=True)
    partial = tmp_path / "partial.jsonl"
    partial.write_bytes(b"".join(lines[:40]) + lines[40][:50])  # killed mid-write
    data = collect(run.input, partial)
    assert data["partial"] is True and data["lines"] == 40
    assert data["totals"]["records"] + data["totals"]["blank_lines"] == 40
    assert "`prompt-worker rerender --resume` continues it" in data["notes"][0]


def test_files_that_are_not_a_runs_input_and_output_are_refused(
    review_run: ReviewRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, _ = review_run
    html = str(tmp_path / "page.html")
    assert main(["report", str(run.output), str(run.input), "--html", html]) == 2
    assert capsys.readouterr().err == (
        f"prompt-worker report: {run.input}: line 1 is not a rerender record: "
        "is this what `prompt-worker rerender --out` wrote?\n"
    )
    shorter = tmp_path / "short.jsonl"
    shorter.write_bytes(b"".join(run.input.read_bytes().splitlines(keepends=True)[:10]))
    assert main(["report", str(shorter), str(run.output), "--html", html]) == 2
    assert "has more lines than" in capsys.readouterr().err
    # Another input whose line 2 holds another job.
    lines = run.input.read_bytes().splitlines(keepends=True)
    lines[1], lines[2] = lines[2], lines[1]
    swapped = tmp_path / "swapped.jsonl"
    swapped.write_bytes(b"".join(lines))
    with pytest.raises(PageError, match="is this the output of that input"):
        collect(swapped, run.output)
    assert main(["report", str(tmp_path / "missing"), str(run.output), "--html", html]) == 2
    assert capsys.readouterr().err.endswith("missing: no such file\n")
    assert not Path(html).exists()


@pytest.mark.parametrize(
    ("content", "why"),
    [
        # No line of it ends: each is the whole file, not a record cut short.
        (b'{"job_id": "a", "kind": "react"}', "line 1 is not a rerender record"),
        (b"# notes, not a run's output", "line 1 is not a rerender record"),
        (b"", "is empty: it holds no rerender record"),
    ],
    ids=["one-json-object", "text", "empty"],
)
def test_a_file_that_is_not_a_runs_output_is_not_an_interrupted_run(
    review_run: ReviewRun,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: bytes,
    why: str,
) -> None:
    run, _ = review_run
    other = tmp_path / "other.jsonl"
    other.write_bytes(content)
    html = tmp_path / "page.html"
    assert main(["report", str(run.input), str(other), "--html", str(html)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"prompt-worker report: {other}") and why in err, err
    assert "interrupted" not in err
    assert not html.exists()


def test_rerender_refuses_an_impossible_html_target_before_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps(conformance_cases()[0]) + "\n")
    out = tmp_path / "out.jsonl"
    args = ["rerender", str(source), "--out", str(out), "--config", CONFIG, "--progress", "off"]
    assert main([*args, "--html", str(tmp_path / "no" / "such" / "page.html")]) == 2
    assert "cannot write" in capsys.readouterr().err
    assert not out.exists()
    assert main([*args, "--html", str(source)]) == 2
    assert "would overwrite" in capsys.readouterr().err
    to_null = ["rerender", str(source), "--out", os.devnull, "--config", CONFIG]
    assert main([*to_null, "--progress", "off", "--html", str(tmp_path / "p.html")]) == 2
    assert "--html needs OUTPUT as a regular file, not /dev/null" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["report", str(source), str(out)])  # --html is required
    assert "--html" in capsys.readouterr().err


def test_rerender_from_stdin_cannot_make_a_page(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "worker", "rerender", "-", "--out", str(tmp_path / "o"),
         "--html", str(tmp_path / "p.html"), "--progress", "off"],
        input=b"", cwd=REPO, capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr == (
        b"prompt-worker rerender: --html needs INPUT as a file, not standard input\n"
    )


def test_a_run_without_prior_messages_has_nothing_to_review(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"".join(orjson.dumps(c["job"]) + b"\n" for c in conformance_cases()[:5]))
    out, html = tmp_path / "out.jsonl", tmp_path / "page.html"
    args = ["rerender", str(source), "--out", str(out), "--config", CONFIG, "--progress", "off"]
    assert main([*args, "--html", str(html)]) == 0
    data = page_data(html)
    assert data["totals"]["with_prior_messages"] == 0 and data["changes"] == []
    assert data["totals"]["ok"] == 5


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_wheel_carries_the_page_assets(tmp_path: Path) -> None:
    stage = tmp_path / "src"
    stage.mkdir()
    for item in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / item, stage / item)
    for item in ("worker", "schemas"):
        shutil.copytree(REPO / item, stage / item, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir",
         str(tmp_path / "dist"), str(stage)],
        check=True, capture_output=True, timeout=570,
    )  # fmt: skip
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for asset in ("drift.html", "drift.css", "drift.js"):
        assert f"worker/rerender/page/{asset}" in names


def test_odd_records_give_a_page_or_one_clear_error(tmp_path: Path) -> None:
    source, output = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    job = {"job": {"job_id": "j1", "kind": "react"}, "messages": [{"role": "user", "content": "a"}]}
    long_id = {**job, "job": {"job_id": "j1" * 500, "kind": "react"}}
    source.write_text(json.dumps(job) + "\n" + json.dumps(long_id) + "\n")
    odd = [
        {"status": "error", "error": "not an object", "kind": ["x"]},
        {"status": "error", "job_id": "j1" * 500, "error": {"code": 5, "details": [1, {}]}},
    ]
    output.write_text("".join(json.dumps(r) + "\n" for r in odd))
    data = collect(source, output)
    assert [(e["kind"], e["code"], e["jobs"]) for e in data["errors"]] == [
        ("(unknown)", "other", 1),
        ("(unknown)", "5", 1),
    ]
    assert len(data["errors"][1]["ids"][0][1]) == 201  # a long id is cut, with "…"
    output.write_text(json.dumps({"status": "ok", "job_id": "j1", "drift": "changed"}) + "\n")
    with pytest.raises(PageError, match="line 1 is a changed job without messages"):
        collect(source, output)


def test_each_change_shows_its_example_jobs_cacheable_prefix_per_message(
    review_run: ReviewRun,
) -> None:
    run, _ = review_run
    data = page_data(run.html)
    records = {
        (number, record.get("job_id")): record
        for number, line in enumerate(run.output.read_text(encoding="utf-8").splitlines(), 1)
        if line
        for record in [json.loads(line)]
    }
    assert data["changes"]
    for change in data["changes"]:
        record = records[tuple(change["example_job"])]
        last = record["meta"]["cache"]["breakpoints"][-1]
        expected = []
        for index, message in enumerate(record["messages"]):
            size = len(message["content"])
            whole = index < last["message"]
            cacheable = size if whole else last["chars"] if index == last["message"] else 0
            expected.append({"role": message["role"], "chars": size, "cacheable": cacheable})
        assert change["cacheable"] == expected
    cacheable = data["totals"]["cacheable"]
    assert cacheable == run.report["totals"]["cacheable"]
    assert 0 < cacheable["stable_tokens"] < cacheable["prompt_tokens"]
