"""Rendering in a helper process, for jobs that must not run on the event loop.

Two kinds of job go here (see docs/PERFORMANCE.md, "Event loop and large jobs"):

* big ones: rendering time grows with the job and holds the GIL inside pydantic,
  orjson and the regex engine, so a thread would still stall the loop while a process
  keeps it nearly free (its only stall is copying the bytes in and out);
* suspect ones: a delivery that already came back once may be what killed a worker
  (out of memory, a crash in native code). Rendered here, such a job can only take down
  the helper, which is replaced, and the worker keeps serving everyone else.
"""

import asyncio
import multiprocessing
import signal
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from worker.ops.logs import format_exception, payload_logging_enabled
from worker.render.config import WorkerConfig
from worker.render.renderer import Renderer
from worker.render.replies import RenderOutcome
from worker.transport.process import die_with_parent

_renderer: Renderer | None = None
_trace_messages = False


def _init_helper(config: WorkerConfig, max_message_bytes: int, trace_messages: bool) -> None:
    # The worker decides when to stop; a Ctrl-C reaching the whole process group must
    # not kill renders the worker is still waiting for.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # SIGKILL, as SIGTERM is ignored: a helper whose worker died has nothing to finish.
    parent = multiprocessing.parent_process()
    die_with_parent(signal.SIGKILL, parent.pid if parent is not None else None)
    global _renderer, _trace_messages
    _trace_messages = trace_messages
    _renderer = Renderer(config, max_message_bytes=max_message_bytes)


def _render_in_helper(body: bytes) -> tuple[RenderOutcome, str | None]:
    assert _renderer is not None, "helper process not initialised"
    outcome = _renderer.render(body)
    trace = None
    if outcome.exception is not None:
        # Tracebacks do not pickle; the text is what the log needs.
        trace = format_exception(outcome.exception, _trace_messages)
        outcome.exception = None
    # The reply body already holds the messages; do not ship them twice.
    outcome.messages = None
    return outcome, trace


class RenderProcessDied(Exception):
    """The helper process died while rendering (the job may be what killed it)."""


class RenderPool:
    """Helper processes holding their own `Renderer`, started lazily, replaced when broken."""

    def __init__(self, config: WorkerConfig, max_message_bytes: int, processes: int = 1) -> None:
        self.config = config
        self.max_message_bytes = max_message_bytes
        self.processes = processes
        self._executor: ProcessPoolExecutor | None = None

    def _ensure(self) -> ProcessPoolExecutor:
        if self._executor is None:
            # spawn, not fork: the worker has threads and an event loop that a forked
            # child must not inherit.
            self._executor = ProcessPoolExecutor(
                self.processes,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_init_helper,
                initargs=(self.config, self.max_message_bytes, payload_logging_enabled()),
            )
        return self._executor

    async def warm_up(self) -> bool:
        """Start the helper now, so the first big job does not pay for its start-up.

        False when it could not start; the next offloaded job tries again.
        """
        try:
            await self.render(b"{}")
        except Exception:  # RenderProcessDied, or spawning failed (e.g. out of memory)
            self.close()
            return False
        return True

    async def render(self, body: bytes) -> tuple[RenderOutcome, str | None]:
        """The outcome and, for internal errors, the traceback text."""
        executor = self._ensure()
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(executor, _render_in_helper, body)
        except BrokenProcessPool as exc:
            if self._executor is executor:
                self._executor = None
                executor.shutdown(wait=False, cancel_futures=True)
            raise RenderProcessDied(str(exc)) from exc

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
