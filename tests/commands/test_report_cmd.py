"""`prompt-worker report`, run as a user runs it, on files that are not a run's pair."""

import json
from pathlib import Path

from tests.cli import prompt_worker
from tests.data import CONFORMANCE


def first_job_id(path: Path) -> str:
    line = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
    job_id: str = line.get("job", line)["job_id"]
    return job_id


def test_the_output_of_another_input_is_refused_not_shown_as_an_interrupted_run(
    tmp_path: Path,
) -> None:
    cases, families = CONFORMANCE / "cases.jsonl", CONFORMANCE / "families.jsonl"
    out = tmp_path / "out-of-cases.jsonl"
    config = str(CONFORMANCE / "worker.yaml")
    run = prompt_worker("rerender", str(cases), "--out", str(out), "--config", config)
    assert run.returncode == 0, run.stderr.decode()
    page = tmp_path / "page.html"

    result = prompt_worker("report", str(families), str(out), "--html", str(page))

    assert result.returncode == 2
    assert result.stdout == b""
    assert result.stderr.decode().splitlines() == [
        f"prompt-worker report: {out}: line 1 answers job {first_job_id(cases)!r} but the "
        f"input's line 1 holds job {first_job_id(families)!r}: is this the output of that "
        "input?"
    ]
    assert not page.exists()
