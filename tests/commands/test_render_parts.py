"""`prompt-worker render` on several processes: the output is the single-process
output, byte for byte but for the render time, whatever the number of processes and
chunks."""

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

import pytest

from tests.cli import prompt_worker
from tests.data import BENCH_JOBS
from worker.commands import render_cmd, render_parts

CONFIG = str(BENCH_JOBS / "worker.yaml")
JOB: dict[str, Any] = json.loads((BENCH_JOBS / "typical_react_job.json").read_text())
RENDER_MS = re.compile(rb',?"render_ms":[0-9.e-]+')


def jobs_file(tmp_path: Path, count: int, bad: frozenset[int] = frozenset()) -> Path:
    path = tmp_path / "jobs.jsonl"
    with path.open("wb") as handle:
        for n in range(count):
            if n % 97 == 5:
                handle.write(b"\n   \n")  # blank lines, wherever a cut may fall
            if n in bad:
                handle.write(b'{"job_id": "broken", "kind": \n')
                continue
            line = json.dumps({**JOB, "job_id": f"part-{n}"}).encode()
            handle.write(b" " + line + b"\r\n" if n % 41 == 0 else line + b"\n")
        handle.write(json.dumps({**JOB, "job_id": "last-without-newline"}).encode())
    return path


def rendered(path: Path, *options: str) -> tuple[int, bytes]:
    result = prompt_worker("render", "--config", CONFIG, str(path), *options)
    assert b"Traceback" not in result.stderr, result.stderr.decode()
    return result.returncode, RENDER_MS.sub(b"", result.stdout)


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of 64 KiB (three typical jobs), so a small file makes many of them: the
    child processes inherit the setting."""
    monkeypatch.setattr(render_parts, "CHUNK_BYTES", 1 << 16)


def rendered_here(path: Path, tmp_path: Path, *options: str) -> tuple[int, bytes]:
    """Exit status and output of `render` run in this process (so a fixture's setting
    reaches it), its stdout a real file as a shell redirection would give."""
    from worker.cli import main

    target = tmp_path / "out.jsonl"
    saved = sys.stdout
    with target.open("w") as sys.stdout:
        try:
            code = main(["render", "--config", CONFIG, str(path), *options])
        finally:
            sys.stdout = saved
    return code, RENDER_MS.sub(b"", target.read_bytes())


def test_every_number_of_processes_gives_the_single_process_output(
    tmp_path: Path, small_chunks: None
) -> None:
    path = jobs_file(tmp_path, 600)
    code, single = rendered(path, "--workers", "1")
    assert code == 0
    # Line N of the output answers line N of the input, a blank line with an empty line.
    inputs = path.read_bytes().split(b"\n")
    outputs = single.split(b"\n")
    assert outputs.pop() == b""
    assert [not line.strip() for line in outputs] == [not line.strip() for line in inputs]
    replies = [json.loads(line) for line in outputs if line]
    assert [r["job_id"] for r in replies] == [f"part-{n}" for n in range(600)] + [
        "last-without-newline"
    ]
    for workers in ("2", "3", "7"):
        assert rendered_here(path, tmp_path, "--workers", workers) == (0, single), workers


def test_the_default_shares_a_large_file_out_and_writes_the_same(tmp_path: Path) -> None:
    path = jobs_file(tmp_path, 500)  # about 10 MiB: more than two chunks
    with path.open("rb") as stream, (tmp_path / "out").open("wb") as out:
        cuts = render_cmd._cuts(stream, out, 2)
    assert cuts is not None and len(cuts) - 1 >= 2
    code, single = rendered(path, "--workers", "1")
    assert code == 0
    assert rendered(path) == (0, single)


def test_a_reader_that_stops_early_ends_the_run_quietly(tmp_path: Path) -> None:
    """`render ... | head -c 100`: whichever process meets the closed pipe, the run
    ends with status 0 and says nothing, as one process does."""
    path = jobs_file(tmp_path, 500)
    for workers in ("1", "2", "3"):
        command = [sys.executable, "-m", "worker", "render", "--config", CONFIG]
        with subprocess.Popen(
            [*command, "--workers", workers, str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        ) as process:
            assert process.stdout is not None and process.stderr is not None
            assert process.stdout.read(100).startswith(b'{"job_id":"part-0"')
            process.stdout.close()
            assert process.wait(timeout=60) == 0, workers
            assert process.stderr.read() == b"", workers


def test_small_files_pipes_and_documents_are_rendered_by_one_process(tmp_path: Path) -> None:
    small = jobs_file(tmp_path, 20)
    with small.open("rb") as stream, (tmp_path / "out").open("wb") as out:
        assert render_cmd._cuts(stream, out, 8) is None
    read_fd, write_fd = os.pipe()
    with os.fdopen(read_fd, "rb") as stream, os.fdopen(write_fd, "wb") as out:
        assert render_cmd._cuts(stream, out, 8) is None
    assert render_parts.chunk_count(render_parts.CHUNK_BYTES, 8) == 1
    assert render_parts.chunk_count(render_parts.CHUNK_BYTES + 1, 8) == 8
    assert render_parts.chunk_count(10 * render_parts.CHUNK_BYTES, 2) == 10
    assert render_parts.chunk_count(10 * render_parts.CHUNK_BYTES, 1) == 1


def test_a_bad_line_in_a_later_part_makes_the_exit_status_1(
    tmp_path: Path, small_chunks: None
) -> None:
    path = jobs_file(tmp_path, 300, bad=frozenset({290}))
    code, single = rendered(path, "--workers", "1")
    assert code == 1
    assert rendered_here(path, tmp_path, "--workers", "3") == (1, single)
    replies = [json.loads(line) for line in single.splitlines() if line]
    statuses = [reply["status"] for reply in replies]
    assert statuses.count("error") == 1 and statuses[290] == "error"
    # The error reply names its input line, counted from the start of the file, not of
    # the part a later process rendered.
    input_line = path.read_bytes().split(b"\n").index(b'{"job_id": "broken", "kind": ') + 1
    assert input_line > 290
    assert replies[290]["error"]["line"] == input_line
    assert f"(line {input_line}, column 29)" in replies[290]["error"]["message"]


def test_a_document_on_several_lines_renders_once(tmp_path: Path) -> None:
    path = tmp_path / "job.json"
    path.write_text(json.dumps(JOB, indent=2))
    code, out = rendered(path, "--workers", "4")
    assert code == 0
    assert [json.loads(line)["job_id"] for line in out.splitlines()] == [JOB["job_id"]]


def test_workers_must_be_positive() -> None:
    assert prompt_worker("render", "--workers", "0").returncode == 2


def test_boundaries_cut_after_newlines_and_cover_the_range() -> None:
    data = b"".join(b"%d\n" % n * 1 for n in range(1000))
    for parts in (1, 2, 3, 10, 5000):
        cuts = render_parts.boundaries(data.find, 0, len(data), parts)
        assert cuts[0] == 0 and cuts[-1] == len(data)
        assert cuts == sorted(set(cuts))
        assert len(cuts) - 1 <= parts
        assert all(data[cut - 1 : cut] == b"\n" for cut in cuts[1:-1])
    assert render_parts.boundaries(b"one long line".find, 0, 13, 4) == [0, 13]


LETTERS = b"".join(b"%c\n" % letter for letter in b"abcdefgh")


def turns(
    tmp_path: Path, workers: int, fail_at: int | None = None, how: str = "raise"
) -> tuple[int | Exception, bytes]:
    """Render the eight one-letter lines of LETTERS, two lines a chunk, upper-cased, in
    `workers` processes; the chunk starting at `fail_at` fails `how`. What the run
    returned (nonzero: the line "c" counts as a failed job) or raised, and the output."""

    def render_range(start: int, end: int, out: IO[bytes]) -> int:
        if start == fail_at:
            if how == "raise":
                raise RuntimeError("boom")
            os.kill(os.getpid(), signal.SIGKILL)
        out.write(LETTERS[start:end].upper())
        return 1 if b"c" in LETTERS[start:end] else 0

    cuts = list(range(0, len(LETTERS) + 1, 4))
    target = tmp_path / "turns.out"
    result: int | Exception
    with target.open("wb") as out:
        try:
            result = render_parts.render_in_turns(cuts, workers, render_range, out)
        except (render_parts.PartFailed, RuntimeError) as exc:
            result = exc
    return result, target.read_bytes()


def test_chunks_taking_turns_write_in_input_order(tmp_path: Path) -> None:
    for workers in (1, 2, 3, 4, 20):
        result, output = turns(tmp_path, workers)
        assert output == LETTERS.upper(), workers
        assert result != 0, workers


@pytest.mark.parametrize("how", ["raise", "killed"])
@pytest.mark.parametrize(("workers", "chunk"), [(2, 3), (3, 2), (4, 3), (4, 1)])
def test_a_child_that_dies_fails_the_run_after_the_chunks_before_it(
    tmp_path: Path, workers: int, chunk: int, how: str
) -> None:
    assert chunk % workers != 0  # a child's chunk, not this process's
    result, output = turns(tmp_path, workers, fail_at=4 * chunk, how=how)
    assert isinstance(result, render_parts.PartFailed)
    assert str(result).startswith(f"part {chunk + 1} of 4 failed")
    assert output == LETTERS[: 4 * chunk].upper()


def test_a_run_whose_own_chunk_raises_stops_every_child(tmp_path: Path) -> None:
    for chunk in (0, 3):  # both this process's, among 3 processes
        result, output = turns(tmp_path, 3, fail_at=4 * chunk)
        assert isinstance(result, RuntimeError)
        # What was written is in order and stops before the chunk that raised; the
        # children were stopped wherever they were, and reaped.
        assert LETTERS.upper().startswith(output)
        assert len(output) <= 4 * chunk
        with pytest.raises(ChildProcessError):
            os.waitpid(-1, os.WNOHANG)
