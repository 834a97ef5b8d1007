"""The drift page of a finished (or interrupted) rerender run.

Builds from the run's INPUT and OUTPUT files the same self-contained HTML page that
`prompt-worker rerender --html` writes at the end of a run: a summary of drift by kind,
each distinct change once with a diff of the messages, errors and bad input lines,
with filters and a search by job id. Reads both files once, side by side; memory stays
flat whatever their size. Exit 0 when the page is written, 2 when the files cannot
make one (missing, unreadable, not a run's input and output).

With --from-archive AMQP_URL --since WHEN instead of the files: the fleet page, what
serve answered in that window (worker/rerender/page/fleet_data.py). See docs/RERENDER.md.
"""

import argparse
import os
import sys

from worker.commands.archive_args import (
    ArchiveArgumentError,
    add_archive_arguments,
    archive_source,
    read_fleet,
)

EXIT_OK = 0
EXIT_USAGE = 2
HELP = (
    "build the drift page (HTML) of a rerender run from its input and output, or the "
    "fleet page from the archive stream"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", metavar="INPUT.jsonl", nargs="?", help="the input the run read")
    parser.add_argument(
        "output", metavar="OUTPUT.jsonl", nargs="?", help="the output the run wrote"
    )
    parser.add_argument("--html", required=True, metavar="PATH", help="where to write the page")
    add_archive_arguments(
        parser, "the fleet page: what serve answered, from the archive stream (docs/RERENDER.md)"
    )
    parser.add_argument(
        "--progress",
        choices=("auto", "bar", "log", "off"),
        default="auto",
        help="while reading the archive: a bar on a terminal, JSON log lines otherwise",
    )


def run(args: argparse.Namespace) -> int:
    from worker.rerender.page.drift_page import write_page
    from worker.rerender.page.page_data import PageError

    if args.from_archive is not None:
        return _fleet_page(args)
    if args.input is None or args.output is None:
        print(
            "prompt-worker report: give INPUT.jsonl OUTPUT.jsonl, or --from-archive AMQP_URL"
            " --since",
            file=sys.stderr,
        )
        return EXIT_USAGE

    try:
        page = write_page(args.input, args.output, args.html)
    except PageError as exc:
        print(f"prompt-worker report: {exc}", file=sys.stderr)
        return EXIT_USAGE
    changes = f"{page.changed_jobs:,} changed jobs in {page.changes:,} distinct changes"
    print(f"drift page: {page.path} ({page.size_bytes:,} bytes; {changes})")
    for note in page.notes:
        print(f"  {note}")
    return EXIT_OK


def _fleet_page(args: argparse.Namespace) -> int:
    from worker.rerender.page.fleet_page import write_fleet_page
    from worker.rerender.page.page_data import PageError

    try:
        if args.input is not None:
            raise ArchiveArgumentError("give INPUT and OUTPUT or --from-archive, not both")
        source = archive_source(args, dict(os.environ))
        data = read_fleet(source, progress=args.progress, log_interval=10.0)
        page = write_fleet_page(data, args.html)
    except (ArchiveArgumentError, PageError) as exc:
        print(f"prompt-worker report: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(
        f"fleet page: {page.path} ({page.size_bytes:,} bytes; {page.records:,} jobs"
        f" in {page.sessions:,} sessions)"
    )
    return EXIT_OK
