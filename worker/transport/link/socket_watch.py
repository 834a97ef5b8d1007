"""When the broker last sent a byte, and a cut for a link that stays silent too long.

A half-open connection (a network path stalled one way, a NAT entry dropped without a
reset) delivers nothing and reports nothing: only the broker's silence tells. aiormq
closes a connection after three heartbeat intervals and more without a frame; the worker
wants it cut sooner, within two intervals (the broker sends a heartbeat every half
interval, so a live link is never silent for long).

aiormq lets its caller open the socket (`transport_factory`, a public argument of its
`Connection`, with `aiormq.TransportFactory` as the base class). `WatchedTransport` opens
it as aiormq's own TCP and TLS factories do, with asyncio's stream protocol, and notes
the time of each chunk the broker sends: nothing is parsed, aiormq reads every frame.
`cut_when_silent` aborts the socket once the broker has been silent for 1.5 intervals;
aiormq sees the connection lost and closes it, and the link's loop reconnects.
"""

import asyncio
import time
from collections.abc import Callable
from typing import Any, cast

from aiormq import TransportFactory
from aiormq.exceptions import AMQPConnectionError
from yarl import URL

# Silent for this many heartbeat intervals: the link is cut.
SILENT_INTERVALS = 1.5


class WatchedSocket:
    """One connection's socket: when it last received bytes, and a way to cut it."""

    __slots__ = ("last_read", "transport")

    def __init__(self) -> None:
        self.last_read = time.monotonic()
        self.transport: asyncio.Transport | None = None

    def silent_for(self) -> float:
        return time.monotonic() - self.last_read

    def cut(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.abort()


class _WatchedProtocol(asyncio.StreamReaderProtocol):
    """asyncio's stream protocol, noting when each chunk arrives."""

    def __init__(self, reader: asyncio.StreamReader, socket: WatchedSocket) -> None:
        super().__init__(reader)
        self.socket = socket

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream's transport (asyncio's, uvloop's, TLS's): all can `abort()`.
        self.socket.transport = cast(asyncio.Transport, transport)
        super().connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self.socket.last_read = time.monotonic()
        super().data_received(data)


class WatchedTransport(TransportFactory):
    """Opens aiormq's socket (TCP or TLS) with a `WatchedSocket` on it: one factory per
    connection."""

    def __init__(self) -> None:
        self.socket = WatchedSocket()

    async def create(
        self, url: URL, **kwargs: Any
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        provider = kwargs.pop("ssl_context_provider", None)
        ssl = None
        if url.scheme == "amqps" and provider is not None:
            ssl = await provider.get_context()
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(loop=loop)
        protocol = _WatchedProtocol(reader, self.socket)
        try:
            transport, _ = await loop.create_connection(
                lambda: protocol,
                url.host or "localhost",
                url.port or (5671 if url.scheme == "amqps" else 5672),
                ssl=ssl,
                **kwargs,
            )
        except OSError as exc:  # as aiormq's own factories report it
            raise AMQPConnectionError(*exc.args) from exc
        return reader, asyncio.StreamWriter(transport, protocol, reader, loop)


async def cut_when_silent(
    socket: WatchedSocket, heartbeat: float, on_silent: Callable[[float], None]
) -> None:
    """Abort the socket once the broker has sent nothing for `SILENT_INTERVALS` heartbeat
    intervals (checked every half interval; runs until cancelled). No heartbeat: no check."""
    if heartbeat <= 0:
        return
    limit = SILENT_INTERVALS * heartbeat
    while True:
        await asyncio.sleep(heartbeat / 2)
        silent = socket.silent_for()
        if silent > limit:
            on_silent(silent)
            socket.cut()
            return
