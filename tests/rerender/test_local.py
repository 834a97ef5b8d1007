"""`prompt-worker rerender` with the local engine: input, records, drift, report, resume."""

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.data import REPO
from tests.rerender.files import CONFIG, conformance_lines, records, write_lines
from worker.cli import main
from worker.render.config import load_config
from worker.render.renderer import Renderer
from worker.render.replies import RenderOutcome
from worker.rerender.drift import DiffWriter, message_diff
from worker.rerender.lines import LineReader, byte_ranges, parse_line, read_range, split_lines
from worker.rerender.local import LocalEngine
from worker.rerender.output import OutputError, resume_point
from worker.rerender.records import ChunkBuilder
from worker.rerender.run import Options, run


def rerender(*args: str) -> int:
    return main(["rerender", *args, "--config", CONFIG, "--progress", "off"])


# -- input ---------------------------------------------------------------------------


def sample_input() -> bytes:
    data = b"".join(b"line %d %s\n" % (n, b"x" * (n * 7 % 50)) for n in range(1, 301))
    return data + b"\n" + b"y" * 700 + b"\nlast line without newline"


def test_blocks_hold_whole_lines() -> None:
    data = sample_input()
    reader = LineReader(io.BytesIO(data), block_bytes=64)
    seen: list[bytes] = []
    for block in reader.blocks():
        assert block.data.endswith(b"\n") or block.data.endswith(b"newline")
        assert data[: block.end_offset].endswith(block.data)
        seen += split_lines(block.data)
    assert seen == data.split(b"\n")
    assert reader.offset == len(data)


@pytest.mark.parametrize("block_bytes", [1, 2, 7, 64, 1000, 1 << 20])
@pytest.mark.parametrize("skip", [0, 1, 150, 301])
def test_byte_ranges_give_every_line_once_in_order(
    tmp_path: Path, block_bytes: int, skip: int
) -> None:
    data = sample_input()
    path = tmp_path / "in.jsonl"
    path.write_bytes(data)
    reader = LineReader(io.BytesIO(data), block_bytes=5)
    assert reader.skip(skip) == skip
    fd = os.open(path, os.O_RDONLY)
    try:
        parts = [
            read_range(fd, reader.offset, low, high, len(data))
            for low, high in byte_ranges(reader.offset, len(data), block_bytes)
        ]
    finally:
        os.close(fd)
    assert b"".join(parts) == data[reader.offset :]
    assert all(part.endswith(b"\n") or part.endswith(b"newline") for part in parts if part)


def test_skip_counts_lines_up_to_the_end() -> None:
    data = b"".join(b"%d\n" % n for n in range(1, 1001))
    reader = LineReader(io.BytesIO(data), block_bytes=100)
    assert reader.skip(777) == 777
    assert reader.offset == data.index(b"\n778\n") + 1
    assert split_lines(next(reader.blocks()).data)[0] == b"778"
    assert LineReader(io.BytesIO(b"1\n2\n3"), block_bytes=2).skip(10) == 3


def test_parse_line_routes_jobs_wrappers_and_bad_lines() -> None:
    job = {"job_id": "j1", "kind": "native-thinking"}
    bare = orjson.dumps(job)
    line = parse_line(bare)
    assert line.body is bare and not line.has_prior and line.kind == "native_thinking"

    messages = [{"role": "user", "content": "hi"}]
    for key in ("messages", "expected_messages"):
        wrapped = parse_line(orjson.dumps({"job": job, key: messages}))
        assert orjson.loads(wrapped.body or b"") == job
        assert wrapped.prior == messages and wrapped.has_prior and not wrapped.bad

    assert parse_line(b"{nope").error_code == "invalid_json"
    assert parse_line(b"[1]").error_code == "invalid_job"
    broken = parse_line(orjson.dumps({"job": job, "messages": [{"role": "user"}]}))
    assert broken.bad and broken.has_prior and broken.job_id == "j1"
    assert broken.error_message == '"messages" is not a list of {"role", "content"} strings'


# -- records -------------------------------------------------------------------------


def test_fast_record_path_gives_the_same_bytes_as_the_generic_one(
    conformance_renderer: Renderer,
) -> None:
    for text in conformance_lines():
        case = json.loads(text)
        raw = orjson.dumps(case)
        line = parse_line(raw)
        outcome = conformance_renderer.render(line.body or b"")
        assert outcome.ok, outcome.error_message
        fast, generic = ChunkBuilder(10), ChunkBuilder(10)
        fast.add_rendered(line, outcome)
        generic.add(line, orjson.loads(outcome.body))
        assert fast.result(0).output == generic.result(0).output


def test_fast_record_path_finds_the_reply_meta_among_other_meta_keys() -> None:
    """The reply's own "meta" is the last key of the body; a "meta" key inside it or
    inside a message, or the text of one in a message, leaves a record equal to the
    generic path's (or sends it down that path)."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": 'quoted ,"meta":{"a":1}} text'},
        {"role": "user", "content": "hi", "meta": {"x": 1}},
    ]
    metas = [
        {"family": "tarsy", "render_ms": 0.5, "meta": {"nested": True}},
        {"family": "tarsy", "render_ms": 0.5, "extra": {"meta": {"deeper": [1]}}},
        {"family": "tarsy", "render_ms": 0.5},
    ]
    for meta in metas:
        reply: dict[str, object] = {
            "job_id": "j",
            "status": "ok",
            "kind": "react",
            "messages": messages,
        }
        reply["meta"] = meta
        outcome = RenderOutcome(
            body=orjson.dumps(reply), status="ok", job_id="j", kind="react", messages=messages
        )
        for raw in (b'{"job_id":"j"}', orjson.dumps({"job": {}, "messages": messages})):
            line = parse_line(raw)
            fast, generic = ChunkBuilder(10), ChunkBuilder(10)
            fast.add_rendered(line, outcome)
            generic.add(line, orjson.loads(outcome.body))
            assert fast.result(0).output == generic.result(0).output, meta


def test_message_diff_shows_the_change_per_message() -> None:
    before = [
        {"role": "system", "content": "same\n"},
        {"role": "user", "content": "one\ntwo\nthree\n"},
    ]
    after = [
        {"role": "system", "content": "same\n"},
        {"role": "user", "content": "one\nTWO\nthree"},
        {"role": "user", "content": "added"},
    ]
    text = message_diff(before, after)
    assert text.startswith("# 2 of 3 messages differ\n")
    assert "--- before/messages[1] (user)\n+++ after/messages[1] (user)\n" in text
    # The lost trailing newline is visible, as in GNU diff.
    assert " one\n-two\n-three\n+TWO\n+three\n\\ No newline at end of file\n" in text
    assert "--- before/messages[2] (absent)\n+++ after/messages[2] (user)\n" in text
    assert "messages[0]" not in text


def test_diff_writer_keeps_to_its_limit_and_clears_an_earlier_run(tmp_path: Path) -> None:
    directory = tmp_path / "diffs"
    writer = DiffWriter(directory, 2, resume=False)
    for line in (1, 2, 3):
        writer.write(line, "job/../x", "react", "text\n")
    names = sorted(p.name for p in directory.iterdir())
    assert names == ["000000001-job_.._x.diff", "000000002-job_.._x.diff"]
    header = "# job job/../x (input line 2, kind react)\ntext\n"
    assert (directory / names[1]).read_text() == header
    (directory / "notes.txt").write_text("mine")
    assert DiffWriter(directory, 5, resume=True).budget() == 3
    DiffWriter(directory, 5, resume=False)
    assert sorted(p.name for p in directory.iterdir()) == ["notes.txt"]


# -- whole runs ----------------------------------------------------------------------


def test_conformance_files_rerender_with_no_drift(tmp_path: Path) -> None:
    source = write_lines(tmp_path / "in.jsonl", conformance_lines())
    out, report = tmp_path / "out.jsonl", tmp_path / "report.json"
    assert rerender(str(source), "--out", str(out), "--report", str(report)) == 0
    written = [record for record in records(out) if record is not None]
    cases = [json.loads(line) for line in conformance_lines()]
    assert [r["job_id"] for r in written] == [c["job"]["job_id"] for c in cases]
    assert {r["drift"] for r in written} == {"same"}
    assert all("render_ms" not in r["meta"] for r in written)
    summary = json.loads(report.read_text())
    assert summary["status"] == "complete"
    assert summary["totals"]["drift"] == {"same": len(cases), "changed": 0, "error": 0}
    assert summary["by_kind"]["react"]["drift_same"] > 0
    families = {item["family"] for item in summary["template_versions"]}
    assert families == {"tarsy", "legacy", "skill"}
    assert summary["renderer_template_versions"]["tarsy"] in {
        item["template_version"] for item in summary["template_versions"]
    }
    assert not (tmp_path / "out.jsonl.diffs").exists()


def test_one_altered_expected_message_is_exactly_one_changed_job(tmp_path: Path) -> None:
    lines = conformance_lines()
    case = json.loads(lines[17])
    content = case["expected_messages"][-1]["content"]
    case["expected_messages"][-1]["content"] = content.replace("\n", "\nA LINE THAT WAS SENT\n", 1)
    lines[17] = json.dumps(case)
    source = write_lines(tmp_path / "in.jsonl", lines)
    out, report = tmp_path / "out.jsonl", tmp_path / "report.json"
    diff_dir = tmp_path / "diffs"
    code = rerender(
        str(source), "--out", str(out), "--report", str(report), "--diff-dir", str(diff_dir)
    )
    assert code == 0  # drift alone is not a failure...
    changed = [
        (number, r["job_id"], r["drift"])
        for number, r in enumerate(records(out), 1)
        if r is not None and r["drift"] != "same"
    ]
    assert changed == [(18, case["job"]["job_id"], "changed")]
    summary = json.loads(report.read_text())
    assert summary["totals"]["drift"]["changed"] == 1
    assert summary["by_kind"][case["job"]["kind"]]["drift_changed"] == 1
    (diff_file,) = diff_dir.iterdir()
    assert diff_file.name == f"000000018-{case['job']['job_id']}.diff"
    diff = diff_file.read_text()
    index = len(case["expected_messages"]) - 1
    assert f"--- before/messages[{index}]" in diff
    assert "\n-A LINE THAT WAS SENT\n" in diff
    changes = [
        line
        for line in diff.splitlines()
        if line.startswith(("+", "-")) and not line.startswith(("+++ ", "--- "))
    ]
    assert changes == ["-A LINE THAT WAS SENT"]
    # ...unless the operator asks for it (CI).
    again = tmp_path / "again.jsonl"
    assert rerender(str(source), "--out", str(again), "--fail-on-drift") == 1


def test_diff_limit_and_all_diffs(tmp_path: Path) -> None:
    lines = []
    for text in conformance_lines()[:6]:
        case = json.loads(text)
        case["expected_messages"][0]["content"] += "!"
        lines.append(json.dumps(case))
    source = write_lines(tmp_path / "in.jsonl", lines)
    limited = tmp_path / "limited"
    code = rerender(
        str(source), "--out", str(tmp_path / "a"), "--diff-dir", str(limited), "--diff-limit", "2"
    )
    assert code == 0
    assert len(list(limited.iterdir())) == 2
    every = tmp_path / "every"
    code = rerender(
        str(source), "--out", str(tmp_path / "b"), "--diff-dir", str(every), "--all-diffs"
    )
    assert code == 0
    assert len(list(every.iterdir())) == 6


def test_bad_lines_are_reported_counted_and_keep_the_output_aligned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = conformance_lines()[:3]
    lines = [good[0], "{not json", "", good[1], "[1, 2]", '{"job": 3}', good[2]]
    source = write_lines(tmp_path / "in.jsonl", lines)
    out, report = tmp_path / "out.jsonl", tmp_path / "report.json"
    assert rerender(str(source), "--out", str(out), "--report", str(report)) == 1
    written = records(out)
    # Output line N answers input line N; the blank line 3 gets an empty line.
    assert len(written) == len(lines) and written[2] is None
    assert [r["job_id"] for r in written if r and not r.get("bad_line")] == [
        json.loads(line)["job"]["job_id"] for line in good
    ]
    bad = [(n, r["error"]["code"]) for n, r in enumerate(written, 1) if r and r.get("bad_line")]
    assert bad == [(2, "invalid_json"), (5, "invalid_job"), (6, "invalid_job")]
    assert written[1] is not None
    assert written[1]["error"]["message"].startswith("not valid JSON: ")
    assert all(r["status"] == "ok" for r in written if r and not r.get("bad_line"))
    summary = json.loads(report.read_text())
    assert summary["totals"]["bad_lines"] == 3
    assert summary["totals"]["blank_lines"] == 1
    assert summary["totals"]["error"] == 3
    assert [b["line"] for b in summary["bad_lines"]] == [2, 5, 6]
    printed = capsys.readouterr()
    for stream in (printed.err, printed.out):  # noted while running, listed in the summary
        assert "bad input line 2: not valid JSON" in stream
        assert "bad input line 5: not a JSON object" in stream


def test_workers_one_and_two_write_the_same_file(tmp_path: Path) -> None:
    lines = conformance_lines() * 3
    source = write_lines(tmp_path / "in.jsonl", lines)
    single, pooled = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    assert rerender(str(source), "--out", str(single), "--workers", "1") == 0
    # Small blocks, so the pool really has several chunks in flight and reorders them.
    options = Options(str(source), str(pooled), progress="off", block_bytes=16 * 1024)
    engine = LocalEngine(Renderer(load_config(CONFIG)), workers=2)
    assert run(options, engine, out=io.StringIO(), err=io.StringIO()) == 0
    assert pooled.read_bytes() == single.read_bytes()
    # Nothing was left beside the output.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "one.jsonl", "two.jsonl"]


def test_progress_log_lines_when_not_on_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write_lines(tmp_path / "in.jsonl", conformance_lines()[:5])
    code = main(["rerender", str(source), "--out", str(tmp_path / "o"), "--config", CONFIG])
    assert code == 0
    events = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert events[-1]["event"] == "rerender.progress"
    assert events[-1]["jobs"] == 5 and events[-1]["percent"] == 100.0


def test_usage_problems_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert rerender(str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "o")) == 2
    assert capsys.readouterr().err == (
        f"prompt-worker rerender: {tmp_path / 'missing.jsonl'}: no such file\n"
    )
    source = write_lines(tmp_path / "in.jsonl", conformance_lines()[:1])
    assert rerender(str(source), "--out", str(source)) == 2
    assert "would overwrite the input" in capsys.readouterr().err
    assert rerender(str(source), "--out", str(tmp_path / "no" / "such" / "dir.jsonl")) == 2
    assert "cannot write" in capsys.readouterr().err


def test_empty_input_gives_an_empty_output(tmp_path: Path) -> None:
    source = write_lines(tmp_path / "in.jsonl", [])
    out = tmp_path / "out.jsonl"
    out.write_text("stale\n")
    assert rerender(str(source), "--out", str(out)) == 0
    assert out.read_bytes() == b""


# -- resume --------------------------------------------------------------------------


def test_resume_cuts_a_torn_line_and_finishes_the_file(tmp_path: Path) -> None:
    lines = conformance_lines()[:20]
    lines.insert(7, "")
    source = write_lines(tmp_path / "in.jsonl", lines)
    full = tmp_path / "full.jsonl"
    assert rerender(str(source), "--out", str(full)) == 0
    whole = full.read_bytes().splitlines(keepends=True)
    partial = tmp_path / "partial.jsonl"
    # Eleven complete lines and half of the twelfth, as a kill inside a write leaves it.
    partial.write_bytes(b"".join(whole[:11]) + whole[11][:100])
    point = resume_point(partial)
    assert (point.lines, point.records) == (11, 10)  # input line 8 was blank
    assert point.truncated_bytes == 100
    assert partial.read_bytes() == b"".join(whole[:11])
    report = tmp_path / "report.json"
    assert rerender(str(source), "--out", str(partial), "--resume", "--report", str(report)) == 0
    assert partial.read_bytes() == full.read_bytes()
    summary = json.loads(report.read_text())
    assert summary["resumed_after_line"] == 11
    assert summary["this_run"]["records"] == 10
    assert summary["totals"]["records"] == 20
    assert summary["totals"]["drift"]["same"] == 20
    assert summary["totals"]["blank_lines"] == 1


def test_resume_of_a_finished_file_renders_nothing(tmp_path: Path) -> None:
    source = write_lines(tmp_path / "in.jsonl", conformance_lines()[:4])
    out, report = tmp_path / "out.jsonl", tmp_path / "report.json"
    assert rerender(str(source), "--out", str(out)) == 0
    before = out.read_bytes()
    assert rerender(str(source), "--out", str(out), "--resume", "--report", str(report)) == 0
    assert out.read_bytes() == before
    assert json.loads(report.read_text())["this_run"]["records"] == 0


def test_resume_refuses_a_file_that_is_not_a_rerender_output(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text('{"something": "else"}\n')
    with pytest.raises(OutputError, match="line 1 is not a rerender record"):
        resume_point(out)
    source = write_lines(tmp_path / "in.jsonl", conformance_lines()[:1])
    assert rerender(str(source), "--out", str(out), "--resume") == 2


def test_resume_refuses_an_output_longer_than_the_input(tmp_path: Path) -> None:
    source = write_lines(tmp_path / "in.jsonl", conformance_lines()[:5])
    out = tmp_path / "out.jsonl"
    assert rerender(str(source), "--out", str(out)) == 0
    shorter = write_lines(tmp_path / "short.jsonl", conformance_lines()[:2])
    assert rerender(str(shorter), "--out", str(out), "--resume") == 2


@pytest.mark.parametrize("progress", ["off", "log"])
def test_unreachable_broker_exits_2_with_one_line_and_leaves_the_output_be(
    tmp_path: Path, progress: str
) -> None:
    source = write_lines(tmp_path / "in.jsonl", conformance_lines()[:2])
    out = tmp_path / "out.jsonl"
    out.write_bytes(b"an earlier output\n")
    result = subprocess.run(
        [sys.executable, "-m", "worker", "rerender", str(source), "--out", str(out),
         "--broker=amqp://guest:secret@127.0.0.1:1/", "--progress", progress],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    # Not even a progress line: the run never started.
    assert result.stderr.startswith(
        "rerender: error: cannot reach the broker at amqp://guest:***@127.0.0.1:1/: "
    )
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert out.read_bytes() == b"an earlier output\n"


def test_broker_url_must_be_an_amqp_url(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = write_lines(tmp_path / "in.jsonl", conformance_lines()[:1])
    with pytest.raises(SystemExit) as exit_info:
        main(["rerender", "--broker", str(source), "--out", str(tmp_path / "o")])
    assert exit_info.value.code == 2
    assert "put INPUT before --broker" in capsys.readouterr().err


def test_a_bare_broker_flag_takes_the_url_from_the_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROMPT_WORKER_AMQP_URL", "amqp://guest:secret@127.0.0.1:1/")
    source = write_lines(tmp_path / "in.jsonl", conformance_lines()[:1])
    out = str(tmp_path / "o")
    assert main(["rerender", str(source), "--out", out, "--broker", "--progress", "off"]) == 2
    assert "cannot reach the broker at amqp://guest:***@127.0.0.1:1/" in capsys.readouterr().err


def test_the_fleets_size_limit_from_the_flag_or_its_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A fleet run with a smaller (or larger) --max-message-bytes answers differently
    # from serve's default; rerender must say what that fleet would send.
    lines = conformance_lines()[:4]
    sizes = [len(orjson.dumps(json.loads(line)["job"])) for line in lines]
    # Between the smallest job and the others, with room for spelling differences.
    limit = min(sizes) + 100
    assert sorted(sizes)[1] > limit + 100
    source = write_lines(tmp_path / "in.jsonl", lines)
    out = tmp_path / "out.jsonl"

    def too_large(*options: str) -> list[int]:
        """The input lines answered payload_too_large."""
        assert rerender(str(source), "--out", str(out), *options) in (0, 1)
        codes = [(r or {}).get("error", {}).get("code") for r in records(out)]
        return [i for i, code in enumerate(codes) if code == "payload_too_large"]

    assert too_large() == []
    larger = [i for i, size in enumerate(sizes) if size > limit]
    assert too_large("--max-message-bytes", str(limit)) == larger
    monkeypatch.setenv("PROMPT_WORKER_MAX_MESSAGE_BYTES", str(limit))
    assert too_large() == larger
    # The flag wins over the variable.
    assert too_large("--max-message-bytes", "1_000_000") == []

    monkeypatch.setenv("PROMPT_WORKER_MAX_MESSAGE_BYTES", "lots")
    assert rerender(str(source), "--out", str(out)) == 2
    assert "PROMPT_WORKER_MAX_MESSAGE_BYTES: expected an integer" in capsys.readouterr().err
