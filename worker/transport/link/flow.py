"""The broker's resource alarms: `connection.blocked` / `connection.unblocked`.

When RabbitMQ runs low on memory or disk it stops reading from every connection that
publishes, and tells the clients that asked for it (the worker does) with
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

The worker's own connection (`worker.transport.link.amqp`) reads these two frames on
channel 0 and calls the callbacks `watch()` gave it: the broker's frames, not a library's
log, are what make the worker unready.
"""

import asyncio
import time
from collections.abc import Callable

from structlog.typing import FilteringBoundLogger

OnBlocked = Callable[[str], None]
OnUnblocked = Callable[[], None]


class BrokerFlow:
    """Whether the broker lets the worker's connection publish; new deliveries wait
    (`admit`) while it does not. `on_change()` runs after each change, for readiness.

    `watch()` gives a new connection its callbacks: only the latest one's count (a
    blocked frame of a connection since replaced says nothing about the new one).
    """

    def __init__(self, log: FilteringBoundLogger, on_change: Callable[[], None]) -> None:
        self.log = log
        self._on_change = on_change
        self._open = asyncio.Event()
        self._open.set()
        self.reason: str | None = None
        self._since = 0.0
        self._held = 0  # deliveries that waited during the current block
        self.waiting = 0  # deliveries waiting right now
        self._watched = 0  # which connection's frames count: the latest one's

    def watch(self) -> tuple[OnBlocked, OnUnblocked]:
        """`on_blocked(reason)` and `on_unblocked()` for a new connection."""
        self._watched += 1
        mine = self._watched

        def blocked(reason: str) -> None:
            if mine == self._watched:
                self.blocked_by(reason)

        def unblocked() -> None:
            if mine == self._watched:
                self.release("unblocked by the broker")

        return blocked, unblocked

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

    def blocked_by(self, reason: str) -> None:
        if self.blocked:
            self.reason = reason
            return
        self.reason = reason
        self._since = time.monotonic()
        self._held = 0
        self._open.clear()
        self.log.warning("broker_blocked", reason=reason)
        self._on_change()

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
