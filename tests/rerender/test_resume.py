"""Interrupting `prompt-worker rerender` for real (SIGINT, SIGKILL) and resuming it."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from tests.data import CONFORMANCE, REPO
from tests.rerender.files import conformance_lines, write_lines

CONFIG = str(CONFORMANCE / "worker.yaml")
# Big enough that a run takes seconds, so the signals land mid-run.
COPIES = 150
DEADLINE = 240.0


def start(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "worker", "rerender", *args, "--config", CONFIG],
        cwd=REPO,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def wait_for_growth(path: Path, beyond: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + DEADLINE
    while not (path.exists() and path.stat().st_size > beyond):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"{path} did not grow"
        time.sleep(0.02)


def finish(process: subprocess.Popen[bytes]) -> tuple[int, str]:
    _, err = process.communicate(timeout=DEADLINE)
    return process.returncode, err.decode()


def uninterrupted(tmp_path: Path, workers: str) -> tuple[Path, bytes]:
    """The input of these tests, and its output from a run never interrupted."""
    source = write_lines(tmp_path / "in.jsonl", conformance_lines() * COPIES)
    reference = tmp_path / "reference.jsonl"
    code, err = finish(start(str(source), "--out", str(reference), "--workers", workers))
    assert code == 0, err
    return source, reference.read_bytes()


@pytest.mark.slow
def test_interrupted_and_killed_runs_resume_to_the_uninterrupted_file(tmp_path: Path) -> None:
    source, expected = uninterrupted(tmp_path, "2")
    total = len(conformance_lines()) * COPIES

    out = tmp_path / "out.jsonl"
    # 1. Ctrl-C: a graceful stop, whole records only, exit 130.
    first = start(str(source), "--out", str(out), "--workers", "2", "--progress", "log")
    wait_for_growth(out, 0, first)
    first.send_signal(signal.SIGINT)
    code, err = finish(first)
    assert code == 130, err
    assert "re-run with --resume" in err
    partial = out.read_bytes()
    assert partial.endswith(b"\n")
    assert expected.startswith(partial)
    done = partial.count(b"\n")
    assert 0 < done < total, "the interruption did not land mid-run"

    # 2. SIGKILL during a resumed run: possibly a torn last line.
    second = start(str(source), "--out", str(out), "--resume", "--workers", "1")
    wait_for_growth(out, len(partial), second)
    second.kill()
    finish(second)
    killed_at = out.read_bytes().count(b"\n")
    assert done < killed_at < total, "the kill did not land mid-run"

    # 3. Resume to the end: the same bytes as the run that was never interrupted.
    report = tmp_path / "report.json"
    code, err = finish(start(str(source), "--out", str(out), "--resume", "--report", str(report)))
    assert code == 0, err
    assert out.read_bytes() == expected
    summary = json.loads(report.read_text())
    assert summary["resumed_after_line"] >= killed_at
    assert summary["totals"]["records"] == total
    assert summary["totals"]["drift"]["same"] == total
    assert expected.count(b"\n") == total
    last_job = json.loads(source.read_bytes().splitlines()[-1])["job"]["job_id"]
    assert orjson.loads(expected.splitlines()[-1])["job_id"] == last_job


def render_processes(parent: int) -> list[int]:
    """The pool's render processes: the run's children (it forks nothing else)."""
    children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
    return [int(pid) for pid in children]


@pytest.mark.slow
def test_a_render_process_that_dies_ends_the_run_with_whole_chunks_in_order(
    tmp_path: Path,
) -> None:
    """Render processes write their chunks themselves, in turn: one killed mid-run must
    not leave the others waiting for a turn that never comes. The run ends (exit 2,
    one line), and what is in the output is the uninterrupted output's beginning,
    which --resume finishes."""
    source, expected = uninterrupted(tmp_path, "1")

    out = tmp_path / "out.jsonl"
    run = start(str(source), "--out", str(out), "--workers", "2", "--progress", "off")
    wait_for_growth(out, 0, run)
    victims = render_processes(run.pid)
    assert victims, "no render process to kill"
    os.kill(victims[-1], signal.SIGKILL)
    code, err = finish(run)
    assert code == 2, err
    assert "a render process died" in err
    written = out.read_bytes()
    whole = written[: written.rfind(b"\n") + 1]  # a torn last line is --resume's to cut
    assert expected.startswith(whole) and len(whole) < len(expected)

    code, err = finish(start(str(source), "--out", str(out), "--resume", "--workers", "2"))
    assert code == 0, err
    assert out.read_bytes() == expected
