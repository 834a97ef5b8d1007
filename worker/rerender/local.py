"""The local engine: renders in this process, or in a pool of processes, no broker.

With N > 1 workers the parent hands out work and writes results in input order, and
does next to nothing else, so N processes render at close to N times one's rate:
  * a regular input file is handed out as byte ranges; each render process reads its
    range itself (`read_range`), so the parent never reads the input;
  * each render process writes its records to a spool file and returns the counts;
    the parent appends the file to the output with copy_file_range, inside the kernel.
Parsing, rendering, drift, diffs and serialisation all happen in the render processes.
At most `2 * N` blocks are in flight, which bounds memory and the reorder window.

Render processes are forked after the renderer is built, so they share its prepared
state and need no pickling of configuration. (`spawn` would re-run `python -m
worker`'s unguarded `__main__` in every child.)
"""

import multiprocessing
import os
import signal
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

import orjson

from worker.render.renderer import Renderer
from worker.rerender.lines import (
    Block,
    Line,
    bad_line_reply,
    byte_ranges,
    parse_line,
    read_range,
    split_lines,
)
from worker.rerender.records import ChunkBuilder, ChunkResult
from worker.rerender.sink import EngineError, Input, Sink

IN_FLIGHT_PER_WORKER = 2
# How a wrapped line (`{"job": ..., "messages": ...}`) usually starts.
_WRAPPED = b'{"job"'
_POLL_SECONDS = 0.2


def render_lines(renderer: Renderer, data: bytes, diff_budget: int) -> ChunkBuilder:
    """The records of the lines in `data`."""
    builder = ChunkBuilder(diff_budget)
    for raw in split_lines(data):
        if not raw.strip():
            builder.blank()
            continue
        outcome = None
        if not raw.lstrip().startswith(_WRAPPED):
            # Most lines are bare jobs: render the raw bytes and let the renderer do the
            # only parse. Whatever does not render is re-read by parse_line below, so
            # bad and wrapped lines get exactly the records the broker engine writes.
            outcome = renderer.render(raw)
            if outcome.ok:
                builder.add_rendered(Line(raw, outcome.job_id, outcome.kind), outcome)
                continue
        line = parse_line(raw)
        if line.body is None:
            builder.add(line, bad_line_reply(line))
            continue
        if outcome is None or line.body is not raw:
            outcome = renderer.render(line.body)
        if outcome.ok:
            builder.add_rendered(line, outcome)
        else:
            builder.add(line, orjson.loads(outcome.body))
    return builder


@dataclass(frozen=True, slots=True)
class _Work:
    """What every render process needs, inherited through fork."""

    renderer: Renderer
    path: str | None  # the input, for byte ranges
    origin: int
    size: int
    spool_dir: str | None


_work: _Work | None = None
_input_fd: int | None = None  # opened in each render process on first use


def _worker_init() -> None:
    # Ctrl-C reaches the whole process group; only the parent decides how to stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _finish(builder: ChunkBuilder, name: int, end_offset: int) -> ChunkResult:
    assert _work is not None
    if _work.spool_dir is None or not len(builder):
        return builder.result(end_offset)
    return builder.spool_result(os.path.join(_work.spool_dir, str(name)), end_offset)


def _render_range(start: int, end: int, diff_budget: int) -> ChunkResult:
    global _input_fd
    assert _work is not None and _work.path is not None, "forked before the work was set"
    if _input_fd is None:
        _input_fd = os.open(_work.path, os.O_RDONLY)
    data = read_range(_input_fd, _work.origin, start, end, _work.size)
    return _finish(render_lines(_work.renderer, data, diff_budget), start, end)


def _render_block(block: Block, diff_budget: int) -> ChunkResult:
    assert _work is not None, "forked before the work was set"
    builder = render_lines(_work.renderer, block.data, diff_budget)
    return _finish(builder, block.end_offset, block.end_offset)


Task = tuple[Callable[..., ChunkResult], tuple[Any, ...]]


def _tasks(source: Input) -> Iterator[Task]:
    if source.path is not None and source.size is not None:
        for start, end in byte_ranges(source.reader.offset, source.size, source.block_bytes):
            yield _render_range, (start, end)
    else:
        for block in source.reader.blocks():
            yield _render_block, (block,)


class LocalEngine:
    name = "local"

    def __init__(self, renderer: Renderer, workers: int) -> None:
        self.renderer = renderer
        self.workers = max(1, workers)

    def describe(self) -> dict[str, Any]:
        return {"engine": self.name, "workers": self.workers}

    def run(self, source: Input, sink: Sink, stop: threading.Event) -> None:
        global _work, _input_fd
        pooled = self.workers > 1
        _work = _Work(
            self.renderer,
            source.path,
            source.reader.offset,
            source.size or 0,
            sink.spool_dir() if pooled else None,
        )
        try:
            if pooled:
                self._run_pool(_tasks(source), sink, stop)
            else:
                for function, args in _tasks(source):
                    if stop.is_set():
                        return
                    sink.accept(function(*args, sink.diff_budget()))
        finally:
            if _input_fd is not None:
                os.close(_input_fd)
            _work, _input_fd = None, None

    def _run_pool(self, tasks: Iterator[Task], sink: Sink, stop: threading.Event) -> None:
        context = multiprocessing.get_context("fork")
        pool = ProcessPoolExecutor(self.workers, mp_context=context, initializer=_worker_init)
        try:
            self._feed(pool, tasks, sink, stop)
        except BrokenProcessPool as exc:
            raise EngineError(f"a render process died unexpectedly ({exc})") from None
        finally:
            # On a stop, blocks not yet started are dropped; running ones finish (< 1 s).
            pool.shutdown(wait=True, cancel_futures=True)

    def _feed(
        self, pool: ProcessPoolExecutor, tasks: Iterator[Task], sink: Sink, stop: threading.Event
    ) -> None:
        in_flight: deque[Future[ChunkResult]] = deque()
        exhausted = False
        limit = self.workers * IN_FLIGHT_PER_WORKER
        while True:
            while not exhausted and not stop.is_set() and len(in_flight) < limit:
                task = next(tasks, None)
                if task is None:
                    exhausted = True
                    break
                function, args = task
                in_flight.append(pool.submit(function, *args, sink.diff_budget()))
            if not in_flight:
                return
            head = in_flight[0]
            # Poll rather than block, so a Ctrl-C (which only sets `stop`) is seen soon.
            while not head.done() and not stop.is_set():
                wait([head], timeout=_POLL_SECONDS)
            if not head.done():
                return
            in_flight.popleft()
            sink.accept(head.result())
            if stop.is_set():
                # Write what is already finished, in order, then stop.
                while in_flight and in_flight[0].done():
                    sink.accept(in_flight.popleft().result())
                return
