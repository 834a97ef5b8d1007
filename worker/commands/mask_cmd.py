"""Show what the masking stage would remove from a text.

For operators tuning `masking:` in worker.yaml. Reads a text (a file, or - for stdin),
masks it as the worker masks every outside-world field of a job, and prints the masked
text on stdout and a summary on stderr: how many values each detector masked and on
which input lines. `--json` prints one JSON object instead (counts, changed lines, text).
The configuration's `masking:` section is used even when `enabled: false`, so a
configuration can be tried before it is switched on. Exit 0 when the text was read and
masked, 2 for usage, unreadable input or a bad configuration.
"""

import argparse
import sys
from collections import Counter
from typing import Any

from worker.commands.common import CONFIG_ENV
from worker.errors import ConfigError

PROG = "prompt-worker mask"
HELP = "show what secret masking would remove from a text"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "input", nargs="?", default="-", metavar="FILE|-", help="text file; - for stdin"
    )
    parser.add_argument(
        "--config",
        metavar="PATH",
        default=None,
        help=f"worker.yaml whose masking section to use; default ${CONFIG_ENV}, else none",
    )
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object: counts, changes, text"
    )


def _read(source: str) -> bytes:
    if source == "-":
        return sys.stdin.buffer.read()
    with open(source, "rb") as handle:
        return handle.read()


def _changes(original: str, masked: str) -> list[dict[str, Any]]:
    """Input line ranges that changed, each with the masked lines that replace it."""
    import difflib  # here: the CLI imports this module for every command's --help line

    before = original.splitlines()
    after = masked.splitlines()
    changes = []
    matcher = difflib.SequenceMatcher(None, before, after, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        changes.append(
            {
                "line": i1 + 1,
                "end_line": max(i1 + 1, i2),
                "masked": "\n".join(after[j1:j2]),
            }
        )
    return changes


def _line_ranges(changes: list[dict[str, Any]]) -> str:
    parts = []
    for change in changes:
        first, last = change["line"], change["end_line"]
        parts.append(str(first) if first == last else f"{first}-{last}")
    return ", ".join(parts)


def run(args: argparse.Namespace) -> int:
    from worker.masking.masker import Masker
    from worker.render.config import load_config

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"{PROG}: configuration error: {exc}", file=sys.stderr)
        return 2
    try:
        data = _read(args.input)
    except OSError as exc:
        print(f"{PROG}: cannot read {args.input}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        print(
            f"{PROG}: {args.input} is not UTF-8 text (byte {exc.start}: {exc.reason})",
            file=sys.stderr,
        )
        return 2

    masker = Masker.from_config(config.masking)
    counts: Counter[str] = Counter()
    masked = masker.mask_text(text, counts)
    changes = _changes(text, masked) if masked is not text else []
    total = sum(counts.values())

    if args.json:
        import orjson

        report = {
            "masked": total > 0,
            "counts": dict(sorted(counts.items())),
            "changes": changes,
            "masking_enabled": config.masking.enabled,
            "text": masked,
        }
        sys.stdout.buffer.write(orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
        sys.stdout.flush()
        return 0

    # Bytes, so a non-UTF-8 locale cannot turn non-ASCII text into a traceback.
    sys.stdout.buffer.write(masked.encode("utf-8"))
    sys.stdout.flush()
    if not config.masking.enabled:
        print(f"{PROG}: note: masking is disabled in this configuration", file=sys.stderr)
    if total:
        detail = ", ".join(f"{name}={n}" for name, n in sorted(counts.items()))
        print(
            f"{PROG}: masked {total} value(s) on line(s) {_line_ranges(changes)}: {detail}",
            file=sys.stderr,
        )
    else:
        print(f"{PROG}: nothing masked", file=sys.stderr)
    return 0
