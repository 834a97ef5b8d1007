"""Print (or write) the JSON Schema of the job or the reply.

The documents are generated from the wire-contract models; printing shows the copies
shipped with the package, which tests keep equal to a fresh generation. --write
generates them anew.
"""

import argparse
import sys
from pathlib import Path

from worker.commands.common import complain, write_text_or_exit
from worker.commands.shipped import shipped_text

HELP = "print the JSON Schema of the job, the reply or the archive record"
# The same names as schemas.json_schema.SCHEMA_FILES (a test checks): importing that
# module would import the models, which printing a shipped file does not need.
SCHEMA_FILES = {
    "job": "job.schema.json",
    "reply": "reply.schema.json",
    "archive-record": "archive-record.schema.json",
}


class _SchemaName(argparse.Action):
    """Refuses an unknown name in words a user would write (argparse's own `choices`
    error names the parser's variable: "argument which: invalid choice")."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        if values not in SCHEMA_FILES:
            parser.error(f"unknown schema {values!r}: choose {', '.join(sorted(SCHEMA_FILES))}")
        setattr(namespace, self.dest, values)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "which",
        metavar="{" + ",".join(sorted(SCHEMA_FILES)) + "}",
        nargs="?",
        default="job",
        action=_SchemaName,
        help="which document (default: job)",
    )
    parser.add_argument(
        "--write",
        metavar="DIR",
        help="generate every schema file into DIR instead of printing (e.g. --write schemas)",
    )


def run(args: argparse.Namespace) -> int:
    if args.write:
        directory = Path(args.write)
        if not directory.is_dir():
            # One line, as for every usage error: not the traceback of the first write.
            what = "is not a directory" if directory.exists() else "does not exist"
            complain("schema", f"cannot write into {directory}: it {what}")
            return 2
        from schemas.json_schema import render_schema

        for name, filename in SCHEMA_FILES.items():
            write_text_or_exit("schema", directory / filename, render_schema(name))
        return 0
    text = shipped_text(SCHEMA_FILES[args.which])
    if text is None:  # an installation without its data files: generate it
        from schemas.json_schema import render_schema

        text = render_schema(args.which)
    sys.stdout.write(text)
    return 0
