"""The output file: appending chunks, and where an interrupted run stopped (`--resume`).

The output file is the only state. Line N of it answers line N of the input and lines
are only ever written whole, in order, so the number of complete lines says how many
input lines are done. A torn last line (the process was killed mid-write) is cut off.
The scan also re-tallies the finished records, so the final report covers the whole
file, not just the last run.
"""

import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from worker.rerender.lines import LineReader, split_lines
from worker.rerender.records import Tally

# copy_file_range cannot serve this pair of files: copy through this process instead.
_NO_KERNEL_COPY = {errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF}
_COPY_BYTES = 1 << 20


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
    """The output, written at its end with plain writes or in-kernel file copies.

    Opened without O_APPEND (copy_file_range refuses such a target) and without
    truncating: a run that fails before its first record leaves an earlier file as it was.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        # Anything else (/dev/null, a pipe) is simply written to.
        self.regular = stat.S_ISREG(os.fstat(self._fd).st_mode)
        if self.regular:
            os.lseek(self._fd, 0, os.SEEK_END)
        self._kernel_copy = hasattr(os, "copy_file_range")

    def truncate(self) -> None:
        if self.regular:
            os.ftruncate(self._fd, 0)
            os.lseek(self._fd, 0, os.SEEK_SET)

    def write(self, data: bytes) -> None:
        _write_all(self._fd, data)

    def append_file(self, path: str, size: int) -> None:
        """Append the first `size` bytes of the file `path`."""
        source = os.open(path, os.O_RDONLY)
        try:
            left = size
            while left and self._kernel_copy:
                try:
                    copied = os.copy_file_range(source, self._fd, left)
                except OSError as exc:
                    if exc.errno not in _NO_KERNEL_COPY or left != size:
                        raise
                    self._kernel_copy = False
                    break
                if not copied:
                    raise OSError(f"{path}: {left} bytes missing")
                left -= copied
            while left:
                data = os.read(source, min(left, _COPY_BYTES))
                if not data:
                    raise OSError(f"{path}: {left} bytes missing")
                _write_all(self._fd, data)
                left -= len(data)
        finally:
            os.close(source)

    def close(self) -> None:
        os.close(self._fd)
