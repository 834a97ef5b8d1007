"""The output file: appending chunks, and where an interrupted run stopped (`--resume`).

The output file is the only state. Line N of it answers line N of the input and lines
are only ever written whole, in order, so the number of complete lines says how many
input lines are done. A torn last line (the process was killed mid-write) is cut off.
The scan also re-tallies the finished records, so the final report covers the whole
file, not just the last run.
"""

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from worker.rerender.lines import LineReader, split_lines
from worker.rerender.records import Tally


class OutputError(Exception):
    """The existing output cannot be resumed from."""


@dataclass(slots=True)
class ResumePoint:
    # Input lines already answered (blank ones included): skip this many.
    lines: int = 0
    records: int = 0
    truncated_bytes: int = 0
    tally: Tally = field(default_factory=Tally)


def resume_point(path: Path) -> ResumePoint:
    """Scan `path` (if it exists), cutting off a torn last line; where to continue."""
    point = ResumePoint()
    if not path.exists():
        return point
    with path.open("r+b") as stream:
        complete_end = 0
        for block in LineReader(stream).blocks():
            data = block.data
            cut = data.rfind(b"\n") + 1
            for raw in split_lines(data[:cut]):
                point.lines += 1
                if not raw:
                    continue  # a blank input line
                try:
                    record = orjson.loads(raw)
                    if not isinstance(record, dict) or "status" not in record:
                        raise ValueError
                except ValueError:
                    raise OutputError(
                        f"{path}: line {point.lines} is not a rerender record; cannot resume "
                        "from this file (run without --resume to start over)"
                    ) from None
                point.records += 1
                point.tally.add(record, point.lines)
            complete_end = block.end_offset - (len(data) - cut)
        size = stream.seek(0, os.SEEK_END)
        if size > complete_end:
            point.truncated_bytes = size - complete_end
            stream.truncate(complete_end)
    point.tally.blank_lines = point.lines - point.records
    return point


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class OutputFile:
    """The output, written at its end.

    Opened without truncating: a run that fails before its first record leaves an
    earlier file as it was.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        # Anything else (/dev/null, a pipe) is simply written to.
        self.regular = stat.S_ISREG(os.fstat(self._fd).st_mode)
        if self.regular:
            os.lseek(self._fd, 0, os.SEEK_END)

    def truncate(self) -> None:
        if self.regular:
            os.ftruncate(self._fd, 0)
            os.lseek(self._fd, 0, os.SEEK_SET)

    @property
    def fd(self) -> int:
        """For render processes that write their chunks themselves (forked after it
        was opened, they share its offset)."""
        return self._fd

    def write(self, data: bytes) -> None:
        _write_all(self._fd, data)

    def close(self) -> None:
        os.close(self._fd)
