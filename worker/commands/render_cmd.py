"""`prompt-worker render`: the embedded, broker-free way to run the builder.

Input is one JSON job (possibly pretty-printed) or JSON Lines, one job a line; output
is one reply a line, in input order. A bad line gets an error reply and rendering goes
on. Exit 0 when every job rendered, 1 when any produced an error reply, 2 for usage.
"""

import argparse
import sys
from collections.abc import Iterator
from typing import IO

import orjson

from worker.commands.common import add_config_argument, load_config_or_exit
from worker.render.renderer import Renderer


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = sub.add_parser(
        "render",
        help="render jobs from a file or stdin to replies on stdout (no broker)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "input",
        nargs="?",
        default="-",
        metavar="FILE|-",
        help="job file (JSON or JSON Lines); - for stdin",
    )
    add_config_argument(parser)
    parser.set_defaults(func=run)


def _is_json(line: bytes) -> bool:
    try:
        orjson.loads(line)
    except orjson.JSONDecodeError:
        return False
    return True


def iter_jobs(stream: IO[bytes]) -> Iterator[bytes]:
    """Job bodies of `stream`: JSON Lines streamed, or one (multi-line) JSON document.

    The first non-blank line decides: if it is JSON on its own the input is JSON Lines
    and is streamed; otherwise the whole input is read as one document, and if that is
    not JSON either, it is split back into lines so each bad line gets its own reply.
    """
    first = b""
    for line in stream:
        if line.strip():
            first = line
            break
    if not first:
        return
    if _is_json(first):
        yield first.strip()
        for line in stream:
            if line.strip():
                yield line.strip()
        return
    rest = stream.read()
    document = first + rest
    if _is_json(document):
        yield document
        return
    for line in document.splitlines():
        if line.strip():
            yield line.strip()


def run(args: argparse.Namespace) -> int:
    config = load_config_or_exit(args.config)
    renderer = Renderer(config)
    try:
        stream: IO[bytes] = sys.stdin.buffer if args.input == "-" else open(args.input, "rb")  # noqa: SIM115
    except OSError as exc:
        print(f"prompt-worker render: cannot open {args.input}: {exc.strerror}", file=sys.stderr)
        return 2
    out = sys.stdout.buffer
    failed = 0
    with stream:
        for body in iter_jobs(stream):
            outcome = renderer.render(body)
            if not outcome.ok:
                failed += 1
            # Flushed per reply so `render` works as a co-process over pipes.
            out.write(outcome.body + b"\n")
            out.flush()
    return 1 if failed else 0
