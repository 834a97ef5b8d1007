"""A bounded slice of the event loop for renders that are expected to be quick.

Small jobs render on the event loop: sending them to the helper process would cost more
than rendering them. A render is linear in the job's size, so the size gate alone keeps
these renders short, but only for the inputs and code paths anybody thought of. As
defence in depth, each such render runs under a CPU-time timer (`ITIMER_PROF`, which
counts the process's CPU time, so a busy machine that merely runs the worker less often
does not look like a slow render): when the slice is over, the `SIGPROF` handler raises
`SliceOverrun` in the rendering code (between two
bytecodes, or as soon as a native call returns), the partial render is dropped, and
the caller sends the job to the helper, where its full deadline applies and the
helper can be killed. The event loop is therefore never held much longer than the
slice, whatever the job. Dropping a render half-way is safe: it has no side effects,
and the only state a renderer keeps between jobs (the tool-catalogue memo) stores each
entry whole, so an interrupted insert at worst miscounts the memo's size a little.

Only the main thread of a process can take signals; elsewhere (or without
`setitimer`), `EventLoopSlice.available` is False and renders run unbounded, as before.
"""

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import TypeVar

T = TypeVar("T")


class SliceOverrun(BaseException):
    """The render overran its slice of the event loop.

    A BaseException, like KeyboardInterrupt, so that no `except Exception` inside the
    renderer turns it into an error reply.
    """


class EventLoopSlice:
    """Runs synchronous calls on the main thread for at most `seconds` each."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._armed = False
        self.available = (
            hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
        )
        if self.available:
            signal.signal(signal.SIGPROF, self._on_alarm)

    def _on_alarm(self, _signum: int, _frame: FrameType | None) -> None:
        # A timer that fired just after the call returned finds the slice disarmed.
        if self._armed:
            self._armed = False
            raise SliceOverrun()

    def run(self, call: Callable[[bytes], T], arg: bytes) -> T:
        """`call(arg)`, or `SliceOverrun` once it has run for `seconds`."""
        if not self.available:
            return call(arg)
        self._armed = True
        signal.setitimer(signal.ITIMER_PROF, self.seconds)
        try:
            return call(arg)
        finally:
            self._armed = False
            signal.setitimer(signal.ITIMER_PROF, 0)

    def close(self) -> None:
        if self.available:
            signal.setitimer(signal.ITIMER_PROF, 0)
            signal.signal(signal.SIGPROF, signal.SIG_DFL)
