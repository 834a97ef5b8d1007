"""`prompt-worker asyncapi`: print, write or check the AsyncAPI document.

The document (schemas/asyncapi.yaml) describes the worker's queues and messages for
producers: AMQP bindings with the exact queue arguments, and the job and reply payload
schemas generated from the wire-contract models.
"""

import argparse
import sys
from pathlib import Path

from worker.transport.asyncapi import render_asyncapi


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = sub.add_parser(
        "asyncapi",
        help="print the AsyncAPI 3.0 document of the worker's queues and messages",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    action = parser.add_mutually_exclusive_group()
    action.add_argument(
        "--write",
        metavar="FILE",
        help="write the document to FILE instead of printing it (e.g. schemas/asyncapi.yaml)",
    )
    action.add_argument(
        "--check",
        metavar="FILE",
        help="exit 1 if FILE differs from a fresh generation (for CI)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    text = render_asyncapi()
    if args.write:
        Path(args.write).write_text(text, encoding="utf-8")
        return 0
    if args.check:
        path = Path(args.check)
        try:
            current = path.read_text(encoding="utf-8")
        except OSError as exc:
            print(f"prompt-worker asyncapi: cannot read {path}: {exc}", file=sys.stderr)
            return 2
        if current != text:
            print(
                f"prompt-worker asyncapi: {path} is stale; regenerate it with "
                f"`prompt-worker asyncapi --write {path}`",
                file=sys.stderr,
            )
            return 1
        return 0
    sys.stdout.write(text)
    return 0
