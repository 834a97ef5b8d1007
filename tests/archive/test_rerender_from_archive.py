"""`rerender --from-archive` against the real RabbitMQ: records in a stream of the
test's own (in the writer's format, worker/archive/record.py), re-rendered with the
local engine; drift, duplicates, filters, the window, progress and resuming a read."""

import asyncio
import datetime
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from yarl import URL

from tests.archive.streams import archive_stream, publish, record_of
from tests.data import REPO
from tests.integration.helpers import free_port
from tests.rerender.files import CONFIG
from tests.rerender.runs import EDIT_BEFORE, conformance_cases, tarsy_template_edit
from tests.unavailable import AMQP_URL
from worker.cli import main
from worker.families import FAMILIES
from worker.transport.link.broker_failures import broker_address

pytestmark = pytest.mark.broker


def rerender(
    out: Path, stream: str, *extra: str, url: str = AMQP_URL
) -> tuple[int, dict[str, Any]]:
    report = out.with_suffix(".report.json")
    code = main(
        ["rerender", "--from-archive", url, "--archive-stream", stream,
         "--out", str(out), "--config", CONFIG, "--progress", "off",
         "--report", str(report), "--diff-limit", "0", *extra]
    )  # fmt: skip
    return code, json.loads(report.read_text())


def tarsy(case: dict[str, Any]) -> bool:
    return FAMILIES[case["job"]["kind"]].name == "tarsy"


@pytest.fixture(scope="module")
def cases() -> list[dict[str, Any]]:
    return conformance_cases()


def test_every_record_renders_the_same_and_a_template_edit_flags_only_its_jobs(
    tmp_path: Path, cases: list[dict[str, Any]]
) -> None:
    with archive_stream("edit") as stream:
        asyncio.run(publish(stream, [record_of(case) for case in cases]))
        code, report = rerender(tmp_path / "same.jsonl", stream, "--since", "1h")
        assert code == 0
        assert report["totals"]["drift"] == {"same": len(cases), "changed": 0, "error": 0}
        assert report["archive"]["records"] == len(cases)
        assert report["archive"]["end_offset"] == len(cases) - 1
        assert report["archive"]["duplicates"] == []
        with tarsy_template_edit():
            code, report = rerender(
                tmp_path / "edited.jsonl", stream, "--since", "1h", "--fail-on-drift"
            )
    assert code == 1
    out = [orjson.loads(line) for line in (tmp_path / "edited.jsonl").read_bytes().splitlines()]
    changed = {r["job_id"] for r in out if r["drift"] == "changed"}
    # Each tarsy job that carries the edited sentence changed; nothing else did.
    expected = {
        case["job"]["job_id"]
        for case in cases
        if tarsy(case) and any(EDIT_BEFORE in m["content"] for m in case["expected_messages"])
    }
    assert expected and changed == expected
    assert report["totals"]["drift"]["changed"] == len(expected)
    assert report["totals"]["drift"]["same"] == len(cases) - len(expected)


def test_a_list_of_addresses_is_read_from_the_first_node_that_answers(
    tmp_path: Path, cases: list[dict[str, Any]]
) -> None:
    # A cluster's addresses, the first of them down: the read moves on to the next.
    down = f"amqp://guest:guest@127.0.0.1:{free_port()}/"
    with archive_stream("addresses") as stream:
        asyncio.run(publish(stream, [record_of(case) for case in cases[:5]]))
        code, report = rerender(
            tmp_path / "o.jsonl", stream, "--since", "1h", url=f"{down},{AMQP_URL}"
        )
    assert code == 0
    assert report["totals"]["drift"] == {"same": 5, "changed": 0, "error": 0}
    assert report["archive"]["broker"] == f"127.0.0.1:{URL(down).port}, {broker_address(AMQP_URL)}"


def test_a_job_recorded_twice_is_flagged_each_time(
    tmp_path: Path, cases: list[dict[str, Any]]
) -> None:
    first, second = record_of(cases[0]), record_of(cases[1])
    with archive_stream("dup") as stream:
        asyncio.run(publish(stream, [first, second, first, first]))
        page = tmp_path / "drift.html"
        code, report = rerender(tmp_path / "o.jsonl", stream, "--since", "1h", "--html", str(page))
    assert code == 0
    # The drift page of the run, as for a file (its input: the spool).
    assert b'id="drift-data"' in page.read_bytes()
    job_id = cases[0]["job"]["job_id"]
    assert report["archive"]["duplicates"] == [
        {"line": 3, "offset": 2, "job_id": job_id, "first_line": 1},
        {"line": 4, "offset": 3, "job_id": job_id, "first_line": 1},
    ]
    spool = [
        orjson.loads(line)
        for line in (tmp_path / "o.jsonl.archive.jsonl").read_bytes().splitlines()
    ]
    assert [line["archive"] for line in spool] == [
        {"offset": 0}, {"offset": 1},
        {"offset": 2, "duplicate_of_line": 1}, {"offset": 3, "duplicate_of_line": 1},
    ]  # fmt: skip
    assert report["totals"]["drift"]["same"] == 4


def test_filters_and_the_window_choose_the_records(
    tmp_path: Path, cases: list[dict[str, Any]]
) -> None:
    old = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=3)
    react = [c for c in cases if c["job"]["kind"] == "react"]
    session = cases[0]["job"]["session"]["session_id"]
    with archive_stream("filters") as stream:
        asyncio.run(publish(stream, [record_of(c) for c in cases[:10]], when=old))
        asyncio.run(publish(stream, [record_of(c) for c in cases]))
        _, recent = rerender(tmp_path / "recent.jsonl", stream, "--since", "2h")
        _, everything = rerender(tmp_path / "all.jsonl", stream, "--since", "4h")
        _, before = rerender(
            tmp_path / "old.jsonl", stream, "--since", "4h",
            "--until", (old + datetime.timedelta(minutes=1)).isoformat(),
        )  # fmt: skip
        _, kinds = rerender(tmp_path / "react.jsonl", stream, "--since", "2h", "--kind", "react")
        _, one = rerender(tmp_path / "one.jsonl", stream, "--since", "2h", "--session", session)
        _, none = rerender(tmp_path / "none.jsonl", stream, "--since", "2h", "--family", "x")
    assert recent["totals"]["records"] == len(cases)
    assert everything["totals"]["records"] == len(cases) + 10
    assert before["totals"]["records"] == 10
    assert kinds["totals"]["records"] == len(react)
    assert set(kinds["by_kind"]) == {"react"}
    sessions = [c for c in cases if c["job"].get("session", {}).get("session_id") == session]
    assert one["totals"]["records"] == len(sessions)
    assert none["totals"]["records"] == 0


def test_a_window_after_the_last_record_is_empty(
    tmp_path: Path, cases: list[dict[str, Any]]
) -> None:
    old = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=3)
    with archive_stream("late") as stream:
        asyncio.run(publish(stream, [record_of(c) for c in cases[:3]], when=old))
        code, report = rerender(tmp_path / "o.jsonl", stream, "--since", "1h")
    assert code == 0
    assert report["totals"]["records"] == 0
    assert report["archive"]["complete"] is True


def test_progress_is_measured_in_stream_offsets(
    tmp_path: Path, cases: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    with archive_stream("progress") as stream:
        asyncio.run(publish(stream, [record_of(c) for c in cases]))
        main(
            ["rerender", "--from-archive", AMQP_URL, "--archive-stream", stream,
             "--since", "1h", "--out", str(tmp_path / "o.jsonl"), "--config", CONFIG,
             "--progress", "log", "--log-interval", "0.001"]
        )  # fmt: skip
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    reading = [line for line in lines if line["event"] == "rerender.progress"]
    # The read's lines first (records by offset), then the render's; each ends at 100%.
    assert reading[0]["percent"] is not None and reading[0]["eta_s"] is not None
    assert [line["percent"] for line in reading].count(100.0) >= 2


def test_an_interrupted_read_resumes_after_its_last_offset(
    tmp_path: Path, cases: list[dict[str, Any]]
) -> None:
    with archive_stream("resume") as stream:
        asyncio.run(publish(stream, [record_of(c) for c in cases]))
        code, _ = rerender(tmp_path / "whole.jsonl", stream, "--since", "1h")
        assert code == 0
        # What an interruption leaves: part of the spool (a torn last line), a state
        # that is not complete, and no output yet.
        out = tmp_path / "resumed.jsonl"
        spool = (tmp_path / "whole.jsonl.archive.jsonl").read_bytes()
        cut = spool.splitlines(keepends=True)
        Path(f"{out}.archive.jsonl").write_bytes(b"".join(cut[:7]) + cut[7][:40])
        state = orjson.loads((tmp_path / "whole.jsonl.archive.json").read_bytes())
        state.update(complete=False, records=7, last_offset=6)
        Path(f"{out}.archive.json").write_bytes(orjson.dumps(state))
        # Records published after the run started are past its end: not read.
        asyncio.run(publish(stream, [record_of(cases[0])]))
        code, report = rerender(out, stream, "--since", "1h", "--resume")
    assert code == 0
    assert Path(f"{out}.archive.jsonl").read_bytes() == spool
    assert out.read_bytes() == (tmp_path / "whole.jsonl").read_bytes()
    assert report["archive"]["records"] == len(cases)


def test_ctrl_c_during_a_run_then_resume_gives_the_whole_output(
    tmp_path: Path, cases: list[dict[str, Any]]
) -> None:
    records = [record_of(c) for c in cases] * 25
    with archive_stream("sigint") as stream:
        asyncio.run(publish(stream, records))
        code, _ = rerender(tmp_path / "whole.jsonl", stream, "--since", "1h")
        assert code == 0
        out = tmp_path / "stopped.jsonl"
        command = [
            sys.executable, "-m", "worker", "rerender", "--from-archive", AMQP_URL,
            "--archive-stream", stream, "--since", "1h", "--out", str(out),
            "--config", CONFIG, "--progress", "off",
        ]  # fmt: skip
        process = subprocess.Popen(command, cwd=REPO, stderr=subprocess.PIPE)
        spool = Path(f"{out}.archive.jsonl")
        deadline = time.monotonic() + 120
        while not (spool.exists() and spool.stat().st_size > 0):
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=120)
        assert process.returncode == 130, err
        assert err.decode().splitlines()[-1].endswith("re-run with --resume to continue")
        code, report = rerender(out, stream, "--since", "1h", "--resume")
    assert code == 0
    assert out.read_bytes() == (tmp_path / "whole.jsonl").read_bytes()
    assert report["archive"]["records"] == len(records)
