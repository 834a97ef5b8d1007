"""`prompt-worker`: one entry point, one module per command.

Each command module exposes `register(subparsers)`, which adds its parser and sets
`func` to a callable taking the parsed arguments and returning the exit code.
Exit codes: 0 success, 1 some job failed, 2 usage or configuration error.
"""

import argparse
import sys
from collections.abc import Sequence

from worker import __version__
from worker.commands import (
    asyncapi_cmd,
    mask_cmd,
    render_cmd,
    replay_dead_cmd,
    report_cmd,
    rerender_cmd,
    schema_cmd,
    serve_cmd,
)

# In the order `prompt-worker --help` lists them: the service, then the tools.
COMMANDS = (
    serve_cmd,
    render_cmd,
    rerender_cmd,
    report_cmd,
    replay_dead_cmd,
    mask_cmd,
    schema_cmd,
    asyncapi_cmd,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="prompt-worker",
        description="Render build-prompt jobs into LLM message lists, embedded or as a RabbitMQ worker.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `prompt-worker render ... | head` closed our stdout: not an error of ours.
        sys.stderr.close()
        return 0
    return code
