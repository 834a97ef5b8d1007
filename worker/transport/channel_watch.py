"""Reconnecting when aio-pika does not bring back a channel the broker closed.

aio-pika restores a channel the broker closed (a channel error, the connection still
up) at once, declaring its queues again, and only once: should that fail (say, a queue
cannot be declared again because of a virtual host's queue limit), aio-pika 10.2 leaves
the channel closed for good while the connection stays up. Whoever owns the channel
would then consume nothing ever again. Dropping the connection hands the matter to the
robust connection, which reconnects and restores the channel, with its pauses, until
that succeeds. The worker's consumer and the producers' RPC link both watch their
channel this way.
"""

import asyncio
import contextlib
from collections.abc import Callable

from aio_pika.abc import AbstractChannel, AbstractConnection

# How long a channel the broker closed, on a connection that stayed up, may stay closed
# before its owner stops waiting for aio-pika to restore it and reconnects.
CHANNEL_RESTORE_GRACE = 5.0


class ChannelWatch:
    """One watch at a time over a channel: `closed()` from the channel's close callback.

    `wanted()` says whether the owner still wants the channel back (not stopping, not
    already back by other means); `on_reconnect()` runs just before the connection is
    dropped (a log line, say).
    """

    def __init__(
        self,
        wanted: Callable[[], bool],
        on_reconnect: Callable[[], None] = lambda: None,
        grace: float = CHANNEL_RESTORE_GRACE,
    ) -> None:
        self._wanted = wanted
        self._on_reconnect = on_reconnect
        self.grace = grace
        self._task: asyncio.Future[None] | None = None

    def closed(self, channel: AbstractChannel, connection: AbstractConnection) -> None:
        """The channel closed: check after the grace whether it is back."""
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._check(channel, connection))

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _check(self, channel: AbstractChannel, connection: AbstractConnection) -> None:
        await asyncio.sleep(self.grace)
        if not self._wanted():
            return
        transport = connection.transport
        if not channel.is_closed or transport is None or transport.connection.is_closed:
            return  # back, or the connection is down: the robust connection has it
        self._on_reconnect()
        with contextlib.suppress(Exception):
            await transport.connection.close(ConnectionError("channel not restored"))
