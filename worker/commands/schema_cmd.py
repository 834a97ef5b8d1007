"""`prompt-worker schema`: print (or write) the JSON Schema of the job and the reply."""

import argparse
import sys
from pathlib import Path

from schemas.json_schema import SCHEMA_FILES, render_schema


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = sub.add_parser(
        "schema",
        help="print the JSON Schema of the job or the reply",
        description="Print the JSON Schema documents generated from the wire-contract models.",
    )
    parser.add_argument("which", choices=sorted(SCHEMA_FILES), nargs="?", default="job")
    parser.add_argument(
        "--write",
        metavar="DIR",
        help="write every schema file into DIR instead of printing (e.g. --write schemas)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.write:
        for name, filename in SCHEMA_FILES.items():
            (Path(args.write) / filename).write_text(render_schema(name), encoding="utf-8")
        return 0
    sys.stdout.write(render_schema(args.which))
    return 0
