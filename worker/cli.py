"""`prompt-worker`: one entry point, one module per command.

Each command module (`worker.commands.<name>_cmd`) exposes `HELP` (its line in
`prompt-worker --help`), a docstring (its `--help` description), `add_arguments(parser)`
and `run(args) -> exit code`. A command module imports only the standard library at
module level: its implementation (pydantic models, the renderer, aio-pika, ...) is
imported by `run`, and `add_arguments` runs only for the command on the command line,
so `--help` and every command start without paying for the others' dependencies.
Exit codes: 0 success, 1 some job failed, 2 usage or configuration error.
"""

import argparse
import importlib
import sys
from collections.abc import Sequence
from types import ModuleType

from worker import __version__

# In the order `prompt-worker --help` lists them: the service, then the tools.
COMMANDS = (
    "serve",
    "render",
    "rerender",
    "report",
    "replay-dead",
    "mask",
    "schema",
    "asyncapi",
)


def command_module(name: str) -> ModuleType:
    """The module of command `name` (`replay-dead` -> worker.commands.replay_dead_cmd)."""
    return importlib.import_module(f"worker.commands.{name.replace('-', '_')}_cmd")


def _first_word(argv: Sequence[str]) -> str | None:
    """The first word that is not an option (the top-level parser's only options,
    --help and --version, take no value): the command, if the line is right."""
    for word in argv:
        if word == "--":
            return None
        if not word.startswith("-"):
            return word
    return None


def _chosen(argv: Sequence[str]) -> str | None:
    """The command named on the command line."""
    word = _first_word(argv)
    return word if word in COMMANDS else None


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The parser; only the command named in `argv` gets its arguments."""
    return _build_parsers(argv)[0]


def _build_parsers(
    argv: Sequence[str],
) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser | None]:
    """The top-level parser and the parser of the command named in `argv` (if any)."""
    command_parser = None
    parser = argparse.ArgumentParser(
        prog="prompt-worker",
        description="Render build-prompt jobs into LLM message lists, embedded or as a RabbitMQ worker.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    chosen = _chosen(argv)
    for name in COMMANDS:
        module = command_module(name)
        command = sub.add_parser(
            name,
            help=module.HELP,
            description=module.__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        if name == chosen:
            module.add_arguments(command)
            command.set_defaults(func=module.run)
            command_parser = command
    return parser, command_parser


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    parser, command_parser = _build_parsers(words)
    word = _first_word(words)
    if word is not None and word not in COMMANDS:
        # argparse would say "argument COMMAND: invalid choice: ... (choose from ...)".
        parser.error(f"unknown command {word!r}: choose one of {', '.join(COMMANDS)}")
    args, unknown = parser.parse_known_args(words)
    if unknown:
        # The command's own usage: the top-level one does not show the command's flags.
        (command_parser or parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        code: int = args.func(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `prompt-worker render ... | head` closed our stdout: not an error of ours.
        sys.stderr.close()
        return 0
    return code
