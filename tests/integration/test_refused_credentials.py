"""Credentials the broker refuses are reported where the operator gave them: the flag,
the variable or the file variable, never a variable nobody set (issue 32)."""

import json
import os
import subprocess
from pathlib import Path

import pytest
from yarl import URL

from tests.cli import prompt_worker
from tests.data import BENCH_JOBS
from tests.integration.helpers import AMQP_URL

pytestmark = pytest.mark.broker

# The test broker's address with a password it refuses.
WRONG = str(URL(AMQP_URL).with_user("guest").with_password("not-the-password"))


def environ(**extra: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PROMPT_WORKER_")}
    return {**clean, **extra}


def refusal(result: subprocess.CompletedProcess[bytes]) -> str:
    assert result.returncode == 2, result.stderr.decode()
    [line] = result.stderr.decode().splitlines()
    assert "access refused by the broker" in line
    assert "not-the-password" not in line
    return line


def test_replay_dead_names_the_file_variable(tmp_path: Path) -> None:
    url_file = tmp_path / "amqp-url"
    url_file.write_text(WRONG + "\n")
    env = environ(PROMPT_WORKER_AMQP_URL_FILE=str(url_file))
    line = refusal(prompt_worker("replay-dead", "--dry-run", env=env))
    assert line.endswith("in the file named by PROMPT_WORKER_AMQP_URL_FILE")


def test_replay_dead_names_the_flag() -> None:
    line = refusal(prompt_worker("replay-dead", "--dry-run", "--amqp-url", WRONG, env=environ()))
    assert line.endswith("check the user name and password in --amqp-url")


def test_rerender_names_broker_or_the_variable(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.jsonl"
    job = json.loads((BENCH_JOBS / "typical_react_job.json").read_text(encoding="utf-8"))
    jobs.write_text(json.dumps(job) + "\n")
    out = str(tmp_path / "out.jsonl")
    given = prompt_worker("rerender", str(jobs), "--out", out, f"--broker={WRONG}", env=environ())
    assert refusal(given).endswith("in --broker")
    from_env = prompt_worker(
        "rerender", str(jobs), "--out", out, "--broker", env=environ(PROMPT_WORKER_AMQP_URL=WRONG)
    )
    assert refusal(from_env).endswith("in PROMPT_WORKER_AMQP_URL")
