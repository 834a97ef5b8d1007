"""Print, write or check the AsyncAPI document.

The document (schemas/asyncapi.yaml) describes the worker's queues and messages for
producers: AMQP bindings with the exact queue arguments, and the job and reply payload
schemas generated from the wire-contract models. Printing shows the copy shipped with
the package, which tests keep equal to a fresh generation; --write and --check generate.
"""

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from worker.commands.common import complain, os_problem, write_text_or_exit
from worker.commands.shipped import shipped_text

if TYPE_CHECKING:
    from schemas.asyncapi import Queues
    from worker.transport.link.topology import Topology

HELP = "print the AsyncAPI 3.0 document of the worker's queues and messages"
# schemas.asyncapi.ASYNCAPI_FILE (a test checks): printing the shipped copy
# needs neither that module nor the models it imports.
ASYNCAPI_FILE = "asyncapi.yaml"


def add_arguments(parser: argparse.ArgumentParser) -> None:
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


def run(args: argparse.Namespace) -> int:
    if not (args.write or args.check):
        shipped = shipped_text(ASYNCAPI_FILE)
        if shipped is not None:
            sys.stdout.write(shipped)
            return 0
    text = generate()
    if args.write:
        write_text_or_exit("asyncapi", Path(args.write), text)
        return 0
    if args.check:
        path = Path(args.check)
        try:
            current = path.read_text(encoding="utf-8")
        except OSError as exc:
            complain("asyncapi", f"cannot read {path}: {os_problem(exc)}")
            return 2
        if current != text:
            complain(
                "asyncapi",
                f"{path} is stale; regenerate it with `prompt-worker asyncapi --write {path}`",
            )
            return 1
        return 0
    sys.stdout.write(text)
    return 0


def document_queues(names: "Topology | None" = None) -> "Queues":
    """The worker's queues as it declares them, for the default names unless `names`."""
    from schemas.asyncapi import Queue, Queues
    from worker.transport.link import topology

    names = names or topology.Topology()
    archive = topology.default_archive()
    return Queues(
        requests=Queue(names.request_queue, names.request_arguments()),
        replies=Queue(names.reply_queue, topology.reply_queue_arguments()),
        dead_letters=Queue(names.dead_letter_queue, topology.dead_letter_queue_arguments()),
        dead_letter_exchange=names.dead_letter_exchange,
        archive=Queue(archive.stream, archive.arguments()),
    )


def generate(names: "Topology | None" = None) -> str:
    """The document's YAML text, for the default queue names unless `names`."""
    from schemas.asyncapi import render_asyncapi

    return render_asyncapi(document_queues(names))
