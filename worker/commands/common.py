"""Pieces several commands share: the --config option and its loading, integer options,
and the one form of a command's error line (`prompt-worker <command>: <problem>`)."""

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from worker.errors import ConfigError

if TYPE_CHECKING:
    from worker.render.config import WorkerConfig

# worker.render.config.CONFIG_ENV (a test checks); that module imports pydantic and
# every family's configuration model, which `--help` does not need.
CONFIG_ENV = "PROMPT_WORKER_CONFIG"


def int_at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer of at least `low`, else a usage error saying why."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value

    return parse


def add_config_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        metavar="PATH",
        default=None,
        help=f"worker.yaml (MCP registry, masking, prompts); default ${CONFIG_ENV}, else none",
    )


def complain(command: str, problem: str) -> None:
    """Say `problem` on stderr as every command says one: one line, the command named."""
    print(f"prompt-worker {command}: {problem}", file=sys.stderr)


def os_problem(exc: OSError) -> str:
    """An OSError in a user's words: its reason ("No such file or directory") without
    Python's "[Errno 2] ... : 'path'" around it (the caller names the path once)."""
    return exc.strerror or str(exc)


def write_text_or_exit(command: str, path: Path, text: str) -> None:
    """Write `text` to `path`, or exit 2 with one line saying why it cannot be written
    (a missing directory, a file where a directory should be, no permission)."""
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        complain(command, f"cannot write {path}: {os_problem(exc)}")
        raise SystemExit(2) from None


def load_config_or_exit(path: str | None, command: str) -> "WorkerConfig":
    """The configuration, or exit 2 with a one-line message naming the file and problem."""
    from worker.render.config import load_config

    try:
        return load_config(path)
    except ConfigError as exc:
        complain(command, f"configuration error: {exc}")
        raise SystemExit(2) from None
