"""Rendering in a helper process, for jobs that must not run on the event loop.

Two kinds of job go here (see docs/PERFORMANCE.md, "Event loop and large jobs"):

* big ones: rendering time grows with the job and holds the GIL inside pydantic,
  orjson and the regex engine, so a thread would still stall the loop while a process
  keeps it nearly free (its only stall is copying the bytes in and out);
* suspect ones: a delivery that already came back once may be what killed a worker
  (out of memory, a crash in native code). Rendered here, such a job can only take down
  the helper, which is replaced, and the worker keeps serving everyone else;
* slow ones: a render that overran its slice of the event loop (`deadline`) finishes
  here, where it can be abandoned.

A render in the helper has a deadline: past it the helper is killed (a thread or a
process cannot be interrupted in the middle of native code, a process can be killed)
and a new one started at once, and the caller gets `RenderTimedOut`. Each helper takes
one job at a time, the others wait their turn outside the executor, so killing a helper
never takes down a job that was only queued behind the slow one, and the wait for a
turn (or for a replacement helper to start) never counts against a job's deadline.
"""

import asyncio
import contextlib
import multiprocessing
import os
import signal
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from worker.ops.logs import format_exception, payload_logging_enabled
from worker.render.config import WorkerConfig
from worker.render.renderer import Renderer
from worker.render.replies import RenderOutcome
from worker.transport.processes.parent import die_with_parent

_renderer: Renderer | None = None
_trace_messages = False
_keep_jobs = True


def _init_helper(
    config: WorkerConfig,
    max_message_bytes: int,
    trace_messages: bool,
    renderer_class: type[Renderer] = Renderer,
    keep_jobs: bool = True,
) -> None:
    # The worker decides when to stop; a Ctrl-C reaching the whole process group must
    # not kill renders the worker is still waiting for.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # SIGKILL, as SIGTERM is ignored: a helper whose worker died has nothing to finish.
    parent = multiprocessing.parent_process()
    die_with_parent(signal.SIGKILL, parent.pid if parent is not None else None)
    global _renderer, _trace_messages, _keep_jobs
    _trace_messages = trace_messages
    _keep_jobs = keep_jobs
    _renderer = renderer_class(config, max_message_bytes=max_message_bytes)


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
    if not _keep_jobs:
        # Only the archive reads the masked job: without it, it is not shipped back.
        outcome.job = outcome.tools_json = None
    return outcome, trace


class RenderProcessDied(Exception):
    """The helper process died while rendering (the job may be what killed it)."""


class RenderTimedOut(Exception):
    """The render overran its deadline; the helper was killed and is being replaced."""


class RenderPool:
    """A helper process holding its own `Renderer`, started lazily, replaced when broken.

    `renderer_class` is what each helper renders with: the worker's own class, so that a
    renderer given to the worker renders the same in its helpers (it must be importable
    by name, as the helpers are spawned).
    """

    def __init__(
        self,
        config: WorkerConfig,
        max_message_bytes: int,
        renderer_class: type[Renderer] = Renderer,
        *,
        keep_jobs: bool = True,
    ) -> None:
        self.config = config
        self.renderer_class = renderer_class
        self.keep_jobs = keep_jobs  # the masked job comes back with the reply (archive)
        self.max_message_bytes = max_message_bytes
        self._executor: ProcessPoolExecutor | None = None
        # The pid of each executor's helper, asked of it before its first render: the
        # process to kill should a render overrun its deadline.
        self._helper_pids: dict[ProcessPoolExecutor, int] = {}
        # Created on first use, inside the event loop that will wait on it.
        self._turns: asyncio.Semaphore | None = None
        self._replacing: asyncio.Task[bool] | None = None
        self.timeouts = 0  # helpers killed for overrunning a deadline

    def _ensure(self) -> ProcessPoolExecutor:
        if self._executor is None:
            # spawn, not fork: the worker has threads and an event loop that a forked
            # child must not inherit.
            self._executor = ProcessPoolExecutor(
                1,  # one helper: the one process to kill on an overrun is known
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_init_helper,
                initargs=(
                    self.config,
                    self.max_message_bytes,
                    payload_logging_enabled(),
                    self.renderer_class,
                    self.keep_jobs,
                ),
            )
        return self._executor

    async def warm_up(self) -> bool:
        """Start the helper now, so the first big job does not pay for its start-up.

        False when it could not start; the next offloaded job tries again.
        """
        try:
            await self.render(b"{}")
        except Exception:  # RenderProcessDied, or spawning failed (e.g. out of memory)
            if self._executor is not None:
                self._helper_pids.pop(self._executor, None)
                self._executor.shutdown(wait=False, cancel_futures=True)
                self._executor = None
            return False
        return True

    async def render(
        self, body: bytes, deadline: float | None = None
    ) -> tuple[RenderOutcome, str | None]:
        """The outcome and, for internal errors, the traceback text.

        Raises `RenderTimedOut` after `deadline` seconds of rendering (None: no limit),
        `RenderProcessDied` when the helper died under the job.
        """
        if self._turns is None:
            self._turns = asyncio.Semaphore(1)
        async with self._turns:
            executor = self._ensure()
            loop = asyncio.get_running_loop()
            try:
                if executor not in self._helper_pids:
                    # Once per helper, before its first render (and outside any deadline,
                    # as the helper's start-up is): whom to kill for an overrun.
                    self._helper_pids[executor] = await loop.run_in_executor(executor, os.getpid)
                return await asyncio.wait_for(
                    loop.run_in_executor(executor, _render_in_helper, body), deadline
                )
            except TimeoutError:
                self.timeouts += 1
                self._discard(executor, kill=True)
                raise RenderTimedOut(f"render took longer than {deadline:g} s") from None
            except BrokenProcessPool as exc:
                self._discard(executor)
                raise RenderProcessDied(str(exc)) from exc

    def _discard(self, executor: ProcessPoolExecutor, *, kill: bool = False) -> None:
        """Drop a helper that overran or died, and start its replacement now."""
        pid = self._helper_pids.pop(executor, None)
        if kill and pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self._executor is executor:
            self._executor = None
            executor.shutdown(wait=False, cancel_futures=True)
            # Started now rather than by the next job, whose deadline would otherwise
            # include the helper's start-up; one at a time, so a helper that cannot
            # start is retried by the next job, not in a loop.
            if self._replacing is None or self._replacing.done():
                self._replacing = asyncio.get_running_loop().create_task(self.warm_up())

    def close(self) -> None:
        if self._replacing is not None:
            self._replacing.cancel()
            self._replacing = None
        executor, self._executor = self._executor, None
        if executor is None:
            return
        # The worker is stopping: a job still rendering was given up by the drain (the
        # broker redelivers it), so the helper is killed rather than awaited.
        # (A helper whose pid was never asked has rendered nothing: it is idle.)
        pid = self._helper_pids.pop(executor, None)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        # Waited for (briefly: the helper is dead): the pool's manager thread closes its
        # wake-up pipe as it finishes, and the interpreter's exit hook writes to that
        # pipe, so a thread still finishing at exit made Python print `OSError: [Errno 9]
        # Bad file descriptor` after the worker had stopped.
        executor.shutdown(wait=True, cancel_futures=True)
