"""Where an earlier, interrupted run stopped (`--resume`).

The output file is the only state: records are written whole and in input order, each
naming its input line, so the last complete record says which input lines are done.
A torn last line (the process was killed mid-write) is cut off. The scan also re-tallies
the finished records, so the final report covers the whole file, not just this run.
"""

from dataclasses import dataclass, field
from pathlib import Path

import orjson

from worker.rerender.lines import LineReader, split_block
from worker.rerender.records import Tally


class OutputError(Exception):
    """The existing output cannot be resumed from."""


@dataclass(slots=True)
class ResumePoint:
    # Input lines already answered (blank ones included): skip this many.
    last_line: int = 0
    records: int = 0
    truncated_bytes: int = 0
    tally: Tally = field(default_factory=Tally)


def resume_point(path: Path) -> ResumePoint:
    """Scan `path` (if it exists), cutting off a torn last line; where to continue."""
    point = ResumePoint()
    if not path.exists():
        return point
    with path.open("r+b") as stream:
        reader = LineReader(stream)
        complete_end = 0
        for block in reader.blocks():
            torn = not block.data.endswith(b"\n")
            lines = list(split_block(block))
            if torn:
                lines.pop()
            for number, raw in lines:
                try:
                    record = orjson.loads(raw)
                    line = record["line"]
                except (orjson.JSONDecodeError, TypeError, KeyError):
                    raise OutputError(
                        f"{path}: line {number} is not a rerender record; cannot resume from "
                        "this file (run without --resume to start over)"
                    ) from None
                if not isinstance(line, int) or line <= point.last_line:
                    raise OutputError(
                        f"{path}: line {number} has input line {line!r} out of order; cannot resume"
                    )
                point.last_line = line
                point.records += 1
                point.tally.add(record)
            complete_end = block.end_offset
            if torn:
                complete_end -= len(block.data) - (block.data.rfind(b"\n") + 1)
        size = stream.seek(0, 2)
        if size > complete_end:
            point.truncated_bytes = size - complete_end
            stream.truncate(complete_end)
    # Blank input lines get no record; the gaps in line numbers are exactly them.
    point.tally.blank_lines = point.last_line - point.records
    return point
