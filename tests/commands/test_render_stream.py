"""`prompt-worker render` as a stream: many jobs through one buffer, in order, and as a
co-process that answers each job before the next is written."""

import io
import json
import select
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

import pytest

from tests.data import BENCH_JOBS, REPO
from worker.commands.render_input import iter_jobs

CONFIG = str(BENCH_JOBS / "worker.yaml")
JOB: dict[str, Any] = json.loads((BENCH_JOBS / "typical_react_job.json").read_text())


def job_line(n: int) -> bytes:
    return json.dumps({**JOB, "job_id": f"stream-{n}"}).encode() + b"\n"


def read_line(stream: IO[bytes], timeout: float = 60.0) -> bytes:
    """One line from `stream`, failing (not hanging) when none comes in time."""
    ready, _, _ = select.select([stream], [], [], timeout)
    assert ready, "no reply: the reply was not flushed while render waited for input"
    return stream.readline()


def test_co_process_gets_each_reply_before_writing_the_next_job() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "worker", "render", "--config", CONFIG, "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        for n in range(3):
            process.stdin.write(job_line(n))
            process.stdin.flush()
            reply = json.loads(read_line(process.stdout))
            assert (reply["job_id"], reply["status"]) == (f"stream-{n}", "ok")
        process.stdin.write(b"not json\n")
        process.stdin.flush()
        assert json.loads(read_line(process.stdout))["status"] == "error"
        process.stdin.close()
        assert process.wait(timeout=60) == 1  # one job failed
        assert process.stdout.read() == b""
    finally:
        process.kill()
        process.wait()


def test_thousands_of_jobs_come_back_complete_and_in_order(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.jsonl"
    count = 2_000
    with jobs.open("wb") as handle:
        for n in range(count):
            # Blank lines, CRLF line ends and padding: kept in place or stripped, not lost.
            handle.write(b"\n" if n % 500 == 7 else b"")
            line = job_line(n)
            handle.write(b"  " + line[:-1] + b"\r\n" if n % 300 == 0 else line)
    result = subprocess.run(
        [sys.executable, "-m", "worker", "render", "--config", CONFIG, str(jobs)],
        capture_output=True,
        cwd=REPO,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    lines = result.stdout.split(b"\n")
    assert lines.pop() == b""  # every reply ends with a newline
    # A blank input line is an empty output line: line N answers line N.
    expected: list[object] = []
    for n in range(count):
        expected += [b"", f"stream-{n}"] if n % 500 == 7 else [f"stream-{n}"]
    assert [json.loads(line)["job_id"] if line else b"" for line in lines] == expected
    assert {json.loads(line)["status"] for line in lines if line} == {"ok"}


def test_output_closed_early_is_not_an_error(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_bytes(b"".join(job_line(n) for n in range(200)))
    with jobs.open("rb") as stdin:
        render = subprocess.Popen(
            [sys.executable, "-m", "worker", "render", "--config", CONFIG, "-"],
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=REPO,
        )
    assert render.stdout is not None and render.stderr is not None
    assert json.loads(read_line(render.stdout))["job_id"] == "stream-0"
    render.stdout.close()  # like `| head -1`
    assert render.wait(timeout=120) == 0
    assert b"Traceback" not in render.stderr.read()


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        # JSON Lines: every line an item at its line number, a blank one without a body.
        (
            b'{"a": 1}\n\n  {"b": 2}  \r\n',
            [(1, 1, b'{"a": 1}'), (2, 1, None), (3, 3, b'{"b": 2}')],
        ),
        (b'\n{"a": 1}', [(1, 1, None), (2, 1, b'{"a": 1}')]),
        (b'{"a": 1}', [(1, 1, b'{"a": 1}')]),
        # One pretty-printed document, after a blank line.
        (b'\n{\n  "a": 1\n}\n', [(2, 1, b'{\n  "a": 1\n}')]),
        # Pretty-printed documents one after another, each where it starts.
        (
            b'{\n  "a": 1\n}\n\n{\n "b": [\n 2]\n}  {"c": 3}\n',
            [(1, 1, b'{\n  "a": 1\n}'), (5, 1, b'{\n "b": [\n 2]\n}'), (8, 4, b'{"c": 3}')],
        ),
        # ... and one that is not JSON: it and the rest are one item, from where it starts.
        (
            b'{\n  "a": 1\n}\n{\n "b": \n}\n{"c": 3}\n',
            [(1, 1, b'{\n  "a": 1\n}'), (4, 1, b'{\n "b": \n}\n{"c": 3}')],
        ),
        (b"\n \n", []),
        # Neither JSON Lines nor documents: line by line, each bad line its own item.
        (b"oops\n{\n\n", [(1, 1, b"oops"), (2, 1, b"{"), (3, 1, None)]),
    ],
)
def test_iter_jobs_splits_without_losing_or_inventing_lines(
    data: bytes, expected: list[tuple[int, int, bytes | None]]
) -> None:
    assert list(iter_jobs(io.BytesIO(data))) == expected


def test_iter_jobs_joins_lines_split_across_reads() -> None:
    class Trickle(io.RawIOBase):
        """Hands out a few bytes per read, as a slow pipe does."""

        def __init__(self, data: bytes) -> None:
            self.data = data

        def readable(self) -> bool:
            return True

        def read1(self, size: int = -1) -> bytes:
            chunk, self.data = self.data[:7], self.data[7:]
            return chunk

    lines = [job_line(n) for n in range(3)]
    jobs = list(iter_jobs(Trickle(b"".join(lines))))  # type: ignore[arg-type]
    assert jobs == [(n, 1, line.rstrip(b"\n")) for n, line in enumerate(lines, 1)]
