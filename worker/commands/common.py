"""Pieces several commands share: the --config option and its loading."""

import argparse
import sys

from worker.errors import ConfigError
from worker.render.config import CONFIG_ENV, WorkerConfig, load_config


def add_config_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        metavar="PATH",
        default=None,
        help=f"worker.yaml (MCP registry, masking, prompts); default ${CONFIG_ENV}, else none",
    )


def load_config_or_exit(path: str | None) -> WorkerConfig:
    """The configuration, or exit 2 with a one-line message naming the file and problem."""
    try:
        return load_config(path)
    except ConfigError as exc:
        print(f"prompt-worker: configuration error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
