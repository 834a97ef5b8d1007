"""The one interface between the engines and the rest of `rerender`.

An engine reads blocks of input lines, turns them into records and hands them to the
sink as `ChunkResult`s in input order. The sink writes, tallies, diffs and shows
progress; the engine never touches the output file. An engine stops early, leaving
only whole chunks behind, when `stop` is set (Ctrl-C).
"""

import threading
from collections.abc import Iterator
from typing import Any, Protocol

from worker.rerender.lines import Block
from worker.rerender.records import ChunkResult


class EngineError(Exception):
    """The engine cannot go on (broker unreachable or lost, a render process died).

    The output written so far is whole and in order: `--resume` continues from it.
    """


class Sink(Protocol):
    def diff_budget(self) -> int:
        """How many more diffs of changed jobs are wanted (engines compute only these)."""
        ...

    def accept(self, chunk: ChunkResult) -> None:
        """Take the next records in input order."""
        ...

    def warn(self, message: str) -> None:
        """Tell the operator something without disturbing the progress display."""
        ...


class Engine(Protocol):
    name: str

    def run(self, blocks: Iterator[Block], sink: Sink, stop: threading.Event) -> None: ...

    def describe(self) -> dict[str, Any]:
        """Settings and counters of this engine, for the report."""
        ...
