"""Every command says a problem the same way: exit 2 and one line on stderr,
`prompt-worker <command>: <problem>`, never a traceback nor Python's errno text."""

from pathlib import Path

import pytest

from tests.cli import prompt_worker
from worker import cli


def one_line(result_stderr: bytes) -> str:
    lines = result_stderr.decode().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_schema_write_into_a_missing_directory(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    result = prompt_worker("schema", "--write", str(missing))
    assert result.returncode == 2
    assert one_line(result.stderr) == (
        f"prompt-worker schema: cannot write into {missing}: it does not exist"
    )


def test_schema_write_into_a_file(tmp_path: Path) -> None:
    a_file = tmp_path / "schemas"
    a_file.write_text("")
    result = prompt_worker("schema", "--write", str(a_file))
    assert result.returncode == 2
    assert one_line(result.stderr) == (
        f"prompt-worker schema: cannot write into {a_file}: it is not a directory"
    )


def test_asyncapi_write_into_a_missing_directory(tmp_path: Path) -> None:
    target = tmp_path / "missing" / "asyncapi.yaml"
    result = prompt_worker("asyncapi", "--write", str(target))
    assert result.returncode == 2
    assert one_line(result.stderr) == (
        f"prompt-worker asyncapi: cannot write {target}: No such file or directory"
    )


def test_asyncapi_check_of_a_missing_file_names_it_once(tmp_path: Path) -> None:
    missing = tmp_path / "asyncapi.yaml"
    result = prompt_worker("asyncapi", "--check", str(missing))
    assert result.returncode == 2
    assert one_line(result.stderr) == (
        f"prompt-worker asyncapi: cannot read {missing}: No such file or directory"
    )


# For each command, a line that makes it fail before it starts, and the problem it names.
FAILURES: dict[str, tuple[tuple[str, ...], str]] = {
    "serve": (("--config", "/nonexistent/worker.yaml"), "configuration error: "),
    "render": (("--config", "/nonexistent/worker.yaml"), "configuration error: "),
    "rerender": (
        (
            "/nonexistent/in.jsonl",
            "--out",
            "/nonexistent/out.jsonl",
            "--config",
            "/nonexistent/w.yaml",
        ),
        "configuration error: ",
    ),
    "report": (("/nonexistent/in.jsonl", "/nonexistent/out.jsonl", "--html", "/tmp/x"), ""),
    "replay-dead": (("--amqp-url", "http://example.invalid/"), ""),
    "mask": (("--config", "/nonexistent/worker.yaml"), "configuration error: "),
    "schema": (("--write", "/nonexistent/dir"), "cannot write into "),
    "asyncapi": (("--check", "/nonexistent/asyncapi.yaml"), "cannot read "),
}


def test_every_command_has_a_failure_here() -> None:
    assert set(FAILURES) == set(cli.COMMANDS)


@pytest.mark.parametrize("command", cli.COMMANDS)
def test_every_command_says_a_problem_in_one_line_naming_itself(command: str) -> None:
    args, problem = FAILURES[command]
    env = {"PATH": "/usr/bin:/bin", "PROMPT_WORKER_HTTP_PORT": "0"}
    result = prompt_worker(command, *args, env=env)
    assert result.returncode == 2, result.stderr.decode()
    line = one_line(result.stderr)
    assert line.startswith(f"prompt-worker {command}: {problem}"), line
    assert "Errno" not in line
