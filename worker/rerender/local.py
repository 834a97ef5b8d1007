"""The local engine: renders in this process, or in a pool of processes, no broker.

With N > 1 workers the parent hands out work and tallies results in input order, and
does next to nothing else, so N processes render at close to N times one's rate:
  * a regular input file is handed out as byte ranges; each render process reads its
    range itself (`read_range`), so the parent never reads the input;
  * each render process writes its chunk's records to the output itself, in turn:
    chunks are numbered as they are handed out, and a process writes chunk k (straight
    from its parts, `writev` on the inherited descriptor) once chunk k - 1 is written,
    then hands the turn on (`_Turns`). Records are written once, never copied through
    a spool file or the parent; the parent gets the counts.
Parsing, rendering, drift, diffs and serialisation all happen in the render processes.
At most `2 * N` blocks are in flight, which bounds memory and the reorder window.

A stop (Ctrl-C) or a failure ends the turns: a process still waiting for its turn
writes nothing, so the output is always the records of chunks 0..k, whole, and the
parent counts exactly those.

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
from worker.rerender.records import ChunkBuilder, ChunkResult, Tally
from worker.rerender.sink import EngineError, Input, Sink

IN_FLIGHT_PER_WORKER = 2
# How a wrapped line (`{"job": ..., "messages": ...}`, or an archive record, SPEC §12,
# as serve writes it) usually starts.
_WRAPPED = (b'{"job"', b'{"record"')
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


class _Turns:
    """Whose turn it is to write: the number of the next chunk, shared by the processes
    of a pool (created before they are forked)."""

    def __init__(self, context: Any, output_fd: int) -> None:
        self.output_fd = output_fd
        # Both guarded by the condition's lock.
        self._next = context.Value("q", 0, lock=False)
        self._stopped = context.Value("b", 0, lock=False)
        self._turn = context.Condition()

    def write(self, number: int, builder: ChunkBuilder) -> bool:
        """Wait for chunk `number`'s turn, write its records and pass the turn on; False
        (nothing written) when the turns were stopped first."""
        with self._turn:
            while self._next.value != number:
                if self._stopped.value:
                    return False
                self._turn.wait(_POLL_SECONDS)
        # Written outside the lock: no other process writes before the turn moves on,
        # and a process killed mid-write leaves no lock held for ever.
        builder.write_to(self.output_fd)
        with self._turn:
            self._next.value = number + 1
            self._turn.notify_all()
        return True

    def stop(self) -> None:
        """No chunk not yet written will be."""
        # A render process killed inside its few lines under the lock would hold it for
        # ever: the flag is set all the same (the pool then terminates its processes).
        locked = self._turn.acquire(timeout=_POLL_SECONDS)
        self._stopped.value = 1
        if locked:
            self._turn.notify_all()
            self._turn.release()


@dataclass(frozen=True, slots=True)
class _Work:
    """What every render process needs, inherited through fork."""

    renderer: Renderer
    path: str | None  # the input, for byte ranges
    origin: int
    size: int
    turns: _Turns | None  # a pool's: its processes write the output themselves


_work: _Work | None = None
_input_fd: int | None = None  # opened in each render process on first use


def _worker_init() -> None:
    # Ctrl-C reaches the whole process group; only the parent decides how to stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _finish(builder: ChunkBuilder, end_offset: int, number: int | None) -> ChunkResult:
    assert _work is not None
    if _work.turns is None or number is None:
        return builder.result(end_offset)
    if _work.turns.write(number, builder):
        return builder.written_result(end_offset)
    return ChunkResult(b"", 0, Tally(), [], end_offset)  # never written: not counted


def _render_range(start: int, end: int, diff_budget: int, number: int | None = None) -> ChunkResult:
    global _input_fd
    assert _work is not None and _work.path is not None, "forked before the work was set"
    if _input_fd is None:
        _input_fd = os.open(_work.path, os.O_RDONLY)
    data = read_range(_input_fd, _work.origin, start, end, _work.size)
    return _finish(render_lines(_work.renderer, data, diff_budget), end, number)


def _render_block(block: Block, diff_budget: int, number: int | None = None) -> ChunkResult:
    assert _work is not None, "forked before the work was set"
    builder = render_lines(_work.renderer, block.data, diff_budget)
    return _finish(builder, block.end_offset, number)


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
        context = multiprocessing.get_context("fork")
        turns = _Turns(context, sink.output_fd()) if pooled else None
        _work = _Work(self.renderer, source.path, source.reader.offset, source.size or 0, turns)
        try:
            if turns is not None:
                self._run_pool(context, turns, _tasks(source), sink, stop)
            else:
                for function, args in _tasks(source):
                    if stop.is_set():
                        return
                    sink.accept(function(*args, sink.diff_budget()))
        finally:
            if _input_fd is not None:
                os.close(_input_fd)
            _work, _input_fd = None, None

    def _run_pool(
        self,
        context: Any,
        turns: _Turns,
        tasks: Iterator[Task],
        sink: Sink,
        stop: threading.Event,
    ) -> None:
        pool = ProcessPoolExecutor(self.workers, mp_context=context, initializer=_worker_init)
        in_flight: deque[Future[ChunkResult]] = deque()
        try:
            self._feed(pool, in_flight, tasks, sink, stop)
        except BrokenProcessPool as exc:
            raise EngineError(f"a render process died unexpectedly ({exc})") from None
        finally:
            # Whatever ended the run, a chunk still waiting for its turn must not wait
            # for ever (the one before it may never come) nor write after the ones
            # counted; chunks not yet started are dropped, running ones finish (< 1 s).
            turns.stop()
            pool.shutdown(wait=True, cancel_futures=True)
        # Stopped (Ctrl-C): chunks written in their turn before the stop are in the
        # output and are counted, in order, up to the first that is not.
        for future in in_flight:
            if future.cancelled() or future.exception() is not None:
                break
            chunk = future.result()
            if not chunk.written:
                break
            sink.accept(chunk)

    def _feed(
        self,
        pool: ProcessPoolExecutor,
        in_flight: "deque[Future[ChunkResult]]",
        tasks: Iterator[Task],
        sink: Sink,
        stop: threading.Event,
    ) -> None:
        exhausted = False
        limit = self.workers * IN_FLIGHT_PER_WORKER
        number = 0
        while True:
            while not exhausted and not stop.is_set() and len(in_flight) < limit:
                task = next(tasks, None)
                if task is None:
                    exhausted = True
                    break
                function, args = task
                in_flight.append(pool.submit(function, *args, sink.diff_budget(), number))
                number += 1
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
                return
