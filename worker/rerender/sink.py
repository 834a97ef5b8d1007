"""The one interface between the engines and the rest of `rerender`.

An engine takes its work from an `Input`, turns lines into records and hands them to
the sink as `ChunkResult`s in input order. The sink writes, tallies, diffs and shows
progress; the engine never touches the output file. An engine stops early, leaving
only whole chunks behind, when `stop` is set (Ctrl-C).
"""

import threading
from dataclasses import dataclass
from typing import Any, Protocol

from worker.rerender.lines import BLOCK_BYTES, LineReader
from worker.rerender.records import ChunkResult


class EngineError(Exception):
    """The engine cannot go on (broker unreachable or lost, a render process died).

    The output written so far is whole and in order: `--resume` continues from it.
    """


@dataclass(frozen=True, slots=True)
class Input:
    """The input from where this run starts (`reader.offset`, after --resume skipped)."""

    reader: LineReader
    # A regular file that other processes may read by offset, and its size; else None.
    path: str | None = None
    size: int | None = None
    block_bytes: int = BLOCK_BYTES


class Sink(Protocol):
    def diff_budget(self) -> int:
        """How many more diffs of changed jobs are wanted (engines compute only these)."""
        ...

    def output_fd(self) -> int:
        """The output's descriptor, started, for an engine whose processes write their
        chunks themselves (`ChunkResult.written`), each in its turn, in input order."""
        ...

    def accept(self, chunk: ChunkResult) -> None:
        """Take the next records in input order."""
        ...

    def warn(self, message: str) -> None:
        """Tell the operator something without disturbing the progress display."""
        ...


class Engine(Protocol):
    name: str

    def run(self, source: Input, sink: Sink, stop: threading.Event) -> None: ...

    def describe(self) -> dict[str, Any]:
        """Settings and counters of this engine, for the report."""
        ...
