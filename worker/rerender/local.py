"""The local engine: renders in this process, or in a pool of processes, no broker.

With N > 1 workers the parent only reads raw blocks of lines, hands each to a process
and writes the records that come back, in input order; parsing, rendering, drift and
serialisation all happen in the workers. At most `2 * N` blocks are in flight, which
bounds both memory and how far the reorder window can run ahead of the writer.

Workers are forked after the renderer is built, so they share its prepared state and
need no pickling of configuration. (`spawn` would re-run `python -m worker`'s unguarded
`__main__` in every child.)
"""

import multiprocessing
import signal
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import orjson

from worker.render import Renderer
from worker.rerender.lines import Block, Line, bad_line_reply, parse_line, split_block
from worker.rerender.records import ChunkBuilder, ChunkResult
from worker.rerender.sink import EngineError, Sink

IN_FLIGHT_PER_WORKER = 2
# How a wrapped line (`{"job": ..., "messages": ...}`) usually starts.
_WRAPPED = b'{"job"'
_POLL_SECONDS = 0.2

# The renderer the pool's processes inherit through fork (set just before the pool starts).
_renderer: Renderer | None = None


def render_block(renderer: Renderer, block: Block, diff_budget: int) -> ChunkResult:
    builder = ChunkBuilder(diff_budget)
    last = block.first_line - 1
    for number, raw in split_block(block):
        last = number
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
                builder.add_rendered(Line(number, raw, outcome.job_id, outcome.kind), outcome)
                continue
        line = parse_line(raw, number)
        if line.body is None:
            builder.add(line, bad_line_reply(line))
            continue
        if outcome is None or line.body is not raw:
            outcome = renderer.render(line.body)
        if outcome.ok:
            builder.add_rendered(line, outcome)
        else:
            builder.add(line, orjson.loads(outcome.body))
    return builder.result(last, block.end_offset)


def _worker_init() -> None:
    # Ctrl-C reaches the whole process group; only the parent decides how to stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _render_in_worker(block: Block, diff_budget: int) -> ChunkResult:
    assert _renderer is not None, "the pool must be forked after the renderer is set"
    return render_block(_renderer, block, diff_budget)


class LocalEngine:
    name = "local"

    def __init__(self, renderer: Renderer, workers: int) -> None:
        self.renderer = renderer
        self.workers = max(1, workers)

    def describe(self) -> dict[str, Any]:
        return {"engine": self.name, "workers": self.workers}

    def run(self, blocks: Iterator[Block], sink: Sink, stop: threading.Event) -> None:
        if self.workers == 1:
            for block in blocks:
                if stop.is_set():
                    return
                sink.accept(render_block(self.renderer, block, sink.diff_budget()))
            return
        global _renderer
        _renderer = self.renderer
        context = multiprocessing.get_context("fork")
        pool = ProcessPoolExecutor(self.workers, mp_context=context, initializer=_worker_init)
        try:
            self._run_pool(pool, blocks, sink, stop)
        except BrokenProcessPool as exc:
            raise EngineError(f"a render process died unexpectedly ({exc})") from None
        finally:
            # On a stop, blocks not yet started are dropped; running ones finish (< 1 s).
            pool.shutdown(wait=True, cancel_futures=True)
            _renderer = None

    def _run_pool(
        self,
        pool: ProcessPoolExecutor,
        blocks: Iterator[Block],
        sink: Sink,
        stop: threading.Event,
    ) -> None:
        in_flight: deque[Future[ChunkResult]] = deque()
        exhausted = False
        limit = self.workers * IN_FLIGHT_PER_WORKER
        while True:
            while not exhausted and not stop.is_set() and len(in_flight) < limit:
                block = next(blocks, None)
                if block is None:
                    exhausted = True
                    break
                in_flight.append(pool.submit(_render_in_worker, block, sink.diff_budget()))
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
