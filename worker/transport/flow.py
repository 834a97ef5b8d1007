"""The broker's resource alarms: `connection.blocked` / `connection.unblocked`.

When RabbitMQ runs low on memory or disk it stops reading from every connection that
publishes, and tells the clients that asked for it (aiormq does) with
`connection.blocked` (the reason, e.g. "low on memory") and later
`connection.unblocked`. A worker whose replies cannot reach the broker should not take
more jobs than it already holds: while blocked it is not ready (`/readyz` 503,
`"unblocked": false`) and every new delivery waits at the door of the consumer, neither
rendered nor settled, until the broker unblocks the connection. Nothing is dropped or
requeued (a requeue could not reach the broker either, and would loop once it did); a
connection that is lost meanwhile leaves those jobs to be delivered again.

RabbitMQ sends `connection.blocked` only once the connection publishes during the alarm
(and unblocks it when the alarm clears): a worker with nothing to answer does not know
of the alarm, and needs to know nothing, as it holds no reply the broker would refuse.

Neither aio-pika nor aiormq (7.2) has a public hook for these frames: aiormq handles them
itself, clearing a private event its writer waits on, and logs one warning per frame
("Connection %r was blocked by: %r" / "Connection %r was unblocked") on the
`aiormq.connection` logger. Those log records are the one place the frames surface, with
the connection and the reason, as they happen; so that is where this module listens
(`_FrameLines`), as worker.transport.connection does for connection attempts. (Polling
that private event instead, by its mangled name, would need a timer, lag by its period
and still not know the reason.) The
library's own lines are replaced by the worker's `broker_blocked` / `broker_unblocked`.
Should aiormq reword them, the alarm would go unseen: tests/integration/
test_broker_alarms.py fails then, so an upgrade cannot slip through unnoticed.
"""

import asyncio
import logging
import time
import weakref
from collections.abc import Callable
from typing import Any

from structlog.typing import FilteringBoundLogger

_LOGGER = "aiormq.connection"
_BLOCKED = "Connection %r was blocked by: %r"
_UNBLOCKED = "Connection %r was unblocked"


class BrokerFlow:
    """Whether the broker lets the worker's connection publish; new deliveries wait
    (`admit`) while it does not.

    `is_ours(connection)` says whether an aiormq connection is the worker's current one
    (a blocked frame of a connection since replaced says nothing about the new one);
    `on_change()` runs after each change, for readiness.
    """

    def __init__(
        self,
        log: FilteringBoundLogger,
        is_ours: Callable[[Any], bool],
        on_change: Callable[[], None],
    ) -> None:
        self.log = log
        self._is_ours = is_ours
        self._on_change = on_change
        self._open = asyncio.Event()
        self._open.set()
        self.reason: str | None = None
        self._since = 0.0
        self._held = 0  # deliveries that waited during the current block
        self.waiting = 0  # deliveries waiting right now
        _FrameLines.install(self)

    @property
    def blocked(self) -> bool:
        return not self._open.is_set()

    async def admit(self) -> None:
        """Return once the broker accepts the worker's publishes (at once, usually)."""
        if self._open.is_set():
            return
        self._held += 1
        self.waiting += 1
        try:
            await self._open.wait()
        finally:
            self.waiting -= 1

    def blocked_by(self, connection: Any, reason: str) -> None:
        if not self._is_ours(connection):
            return
        if self.blocked:
            self.reason = reason
            return
        self.reason = reason
        self._since = time.monotonic()
        self._held = 0
        self._open.clear()
        self.log.warning("broker_blocked", reason=reason)
        self._on_change()

    def unblocked(self, connection: Any) -> None:
        if self._is_ours(connection):
            self.release("unblocked by the broker")

    def release(self, why: str) -> None:
        """Let deliveries through again: the broker unblocked the connection, or the
        connection is gone (a new one starts unblocked)."""
        if not self.blocked:
            return
        self.log.info(
            "broker_unblocked",
            held=self._held,
            blocked_s=round(time.monotonic() - self._since, 1),
            reason=self.reason,
            why=why,
        )
        self.reason = None
        self._open.set()
        self._on_change()


class _FrameLines(logging.Filter):
    """Turns aiormq's lines about `connection.blocked` / `connection.unblocked` into
    calls on the `BrokerFlow` of that connection, and drops them."""

    installed = False

    @classmethod
    def install(cls, flow: BrokerFlow) -> None:
        _FLOWS.add(flow)
        if cls.installed:
            return
        cls.installed = True
        logger = logging.getLogger(_LOGGER)
        logger.addFilter(cls())
        # The records are warnings: they must be made whatever the log level. Pinned on
        # this logger itself, so that quieting "aiormq" later (a higher log level, the
        # one-shot commands' silence_broker_libraries) cannot hide the frames.
        logger.setLevel(min(logger.getEffectiveLevel(), logging.WARNING))

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg not in (_BLOCKED, _UNBLOCKED):
            return True
        args = record.args if isinstance(record.args, tuple) else ()
        if not args:
            return True
        for flow in list(_FLOWS):
            if record.msg == _BLOCKED:
                flow.blocked_by(args[0], str(args[1]) if len(args) > 1 else "")
            else:
                flow.unblocked(args[0])
        return False


# Every worker's flow in this process (one, but for tests).
_FLOWS: "weakref.WeakSet[BrokerFlow]" = weakref.WeakSet()
