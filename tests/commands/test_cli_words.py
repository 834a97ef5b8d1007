"""What the command line says when it is used wrongly, and how each `--help` opens."""

import pytest

from tests.cli import prompt_worker
from worker.cli import COMMANDS


@pytest.mark.parametrize("command", COMMANDS)
def test_a_bad_flag_shows_the_commands_own_usage(command: str) -> None:
    result = prompt_worker(command, "--bogus", "x")
    err = result.stderr.decode()
    assert result.returncode == 2
    assert err.startswith(f"usage: prompt-worker {command} "), err
    # Some commands first miss a required argument; the error is the command's all the same.
    assert f"\nprompt-worker {command}: error: " in err, err


def test_render_names_the_flag_it_does_not_know() -> None:
    result = prompt_worker("render", "--bogus", "x")
    assert result.returncode == 2
    assert result.stderr.decode() == (
        "usage: prompt-worker render [-h] [--config PATH] [--workers N]\n"
        "                            [--budget TOKENS] [--tokenizer NAME]\n"
        "                            [--policy {cache,tight}]\n"
        "                            [FILE|-]\n"
        "prompt-worker render: error: unrecognized arguments: --bogus\n"
    )


def test_a_bad_flag_before_any_command_shows_the_top_level_usage() -> None:
    result = prompt_worker("--bogus")
    assert result.returncode == 2
    assert result.stderr.decode().startswith("usage: prompt-worker [-h] [--version] COMMAND")


def test_an_unknown_schema_is_named_with_the_choices() -> None:
    result = prompt_worker("schema", "foo")
    assert result.returncode == 2
    assert result.stderr.decode().splitlines()[-1] == (
        "prompt-worker schema: error: unknown schema 'foo': choose archive-record, job, reply"
    )
    assert result.stdout == b""


@pytest.mark.parametrize("which", ["job", "reply"])
def test_each_schema_name_is_accepted(which: str) -> None:
    result = prompt_worker("schema", which)
    assert result.returncode == 0, result.stderr
    assert b'"$schema"' in result.stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_no_help_opens_with_a_back_quoted_name(command: str) -> None:
    result = prompt_worker(command, "--help")
    assert result.returncode == 0
    # The usage lines, a blank line, then the description.
    description = result.stdout.decode().split("\n\n", 1)[1]
    assert description[:1].isupper(), description[:80]
    assert not description.startswith("`")
