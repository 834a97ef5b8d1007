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


@pytest.mark.parametrize(
    ("command", "option", "target", "problem"),
    [
        ("schema", "--write", "missing", "cannot write into {path}: it does not exist"),
        ("schema", "--write", "a-file", "cannot write into {path}: it is not a directory"),
        (
            "asyncapi",
            "--write",
            "missing/asyncapi.yaml",
            "cannot write {path}: No such file or directory",
        ),
        # Named once, without Python's "[Errno 2] No such file or directory: '...'".
        ("asyncapi", "--check", "missing.yaml", "cannot read {path}: No such file or directory"),
    ],
)
def test_a_file_that_cannot_be_written_or_read_is_one_line(
    tmp_path: Path, command: str, option: str, target: str, problem: str
) -> None:
    (tmp_path / "a-file").write_text("")
    path = tmp_path / target
    result = prompt_worker(command, option, str(path))
    assert result.returncode == 2
    assert one_line(result.stderr) == f"prompt-worker {command}: {problem.format(path=path)}"


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
