"""`prompt-worker render` on several processes: the output is the single-process
output, byte for byte but for the render time, whatever the number of parts."""

import io
import json
import re
from pathlib import Path
from typing import IO, Any

import pytest

from tests.cli import prompt_worker
from tests.data import BENCH_JOBS
from worker.commands import render_parts

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


def test_every_number_of_parts_gives_the_single_process_output(tmp_path: Path) -> None:
    path = jobs_file(tmp_path, 600)
    code, single = rendered(path, "--workers", "1")
    assert code == 0
    replies = [json.loads(line) for line in single.splitlines()]
    assert [r["job_id"] for r in replies] == [f"part-{n}" for n in range(600)] + [
        "last-without-newline"
    ]
    for workers in ("2", "3", "7"):
        assert rendered(path, "--workers", workers) == (0, single), workers


def test_a_bad_line_in_a_later_part_makes_the_exit_status_1(tmp_path: Path) -> None:
    path = jobs_file(tmp_path, 300, bad=frozenset({290}))
    code, single = rendered(path, "--workers", "1")
    assert code == 1
    assert rendered(path, "--workers", "3") == (1, single)
    statuses = [json.loads(line)["status"] for line in single.splitlines()]
    assert statuses.count("error") == 1 and statuses[290] == "error"


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


def test_a_part_that_dies_fails_the_run_after_the_parts_before_it() -> None:
    data = b"a\nb\nc\n"
    cuts = [0, 2, 4, 6]

    def render_range(start: int, end: int, out: IO[bytes]) -> int:
        if start == 4:
            raise RuntimeError("boom")  # in the third part's process
        out.write(data[start:end].upper())
        return 0

    out = io.BytesIO()
    with pytest.raises(render_parts.PartFailed, match="part 3 of 3"):
        render_parts.render_in_parts(cuts, render_range, out)
    assert out.getvalue() == b"A\nB\n"
