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

aiormq reads these two frames itself and offers no callback for them, nor the reason
the broker gives; what it does offer is `Connection.ready()` (its public abstract
class), which returns at once while the connection is open and unblocked and waits
while the broker blocks it. `watch(connection)` follows that: every `CHECK_EVERY`
seconds it asks `ready()`, and one that does not return within `READY_WITHIN` means the
broker blocked the connection; the worker is then unready with the reason
`BLOCKED_REASON` until `ready()` returns. What it costs: the line and `/readyz` say "a
resource alarm", not which one (memory or disk: the broker's own log and
`rabbitmq-diagnostics alarms` say), and the worker notices a block up to `CHECK_EVERY`
seconds after the broker's frame. No library log is read.
"""

import asyncio
import time
from collections.abc import Callable

from aiormq.abc import AbstractConnection
from structlog.typing import FilteringBoundLogger

# How often the connection's `ready()` is asked, and how long it may take to answer.
CHECK_EVERY = 1.0
READY_WITHIN = 0.2
# What the worker can say of a block through aiormq's public API.
BLOCKED_REASON = "the broker blocked the connection (a resource alarm: memory or disk)"


class BrokerFlow:
    """Whether the broker lets the worker's connection publish; new deliveries wait
    (`admit`) while it does not. `on_change()` runs after each change, for readiness.

    `watch()` follows a new connection: only the latest one's blocks count (a block
    of a connection since replaced says nothing about the new one).
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
        self._watched = 0  # which connection's blocks count: the latest one's

    def watch(self, connection: AbstractConnection) -> "asyncio.Task[None]":
        """Follow a new connection's blocks until the task is cancelled (when the
        connection closes). Only the latest connection counts."""
        self._watched += 1
        return asyncio.get_running_loop().create_task(self._follow(connection, self._watched))

    async def _follow(self, connection: AbstractConnection, mine: int) -> None:
        while mine == self._watched:
            await asyncio.sleep(CHECK_EVERY)
            try:
                await asyncio.wait_for(connection.ready(), READY_WITHIN)
                continue
            except TimeoutError:
                pass
            if mine != self._watched or connection.is_closed:
                return
            self.blocked_by(BLOCKED_REASON)
            await connection.ready()
            if mine == self._watched:
                self.release("unblocked by the broker")

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
