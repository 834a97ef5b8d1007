"""Pieces several commands share: the --config option and its loading, integer options."""

import argparse
import sys
from collections.abc import Callable
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


def load_config_or_exit(path: str | None) -> "WorkerConfig":
    """The configuration, or exit 2 with a one-line message naming the file and problem."""
    from worker.render.config import load_config

    try:
        return load_config(path)
    except ConfigError as exc:
        print(f"prompt-worker: configuration error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
