"""The drift page of a finished (or interrupted) rerender run.

Builds from the run's INPUT and OUTPUT files the same self-contained HTML page that
`prompt-worker rerender --html` writes at the end of a run: a summary of drift by kind,
each distinct change once with a diff of the messages, errors and bad input lines,
with filters and a search by job id. Reads both files once, side by side; memory stays
flat whatever their size. Exit 0 when the page is written, 2 when the files cannot
make one (missing, unreadable, not a run's input and output). See docs/RERENDER.md.
"""

import argparse
import sys

EXIT_OK = 0
EXIT_USAGE = 2
HELP = "build the drift page (HTML) of a rerender run from its input and output"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", metavar="INPUT.jsonl", help="the input the run read")
    parser.add_argument("output", metavar="OUTPUT.jsonl", help="the output the run wrote")
    parser.add_argument(
        "--html", required=True, metavar="PATH", help="where to write the drift page"
    )


def run(args: argparse.Namespace) -> int:
    from worker.rerender.page.drift_page import write_page
    from worker.rerender.page.page_data import PageError

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
