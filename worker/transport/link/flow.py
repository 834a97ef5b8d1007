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

aiormq handles these two frames itself and offers no hook for them. It does let its
caller open the socket (`transport_factory`, a public argument of its connection), so
the worker's link opens it through `TappedTransport`: the bytes the broker sends pass a
`FrameTap` on their way to aiormq, which follows the frame boundaries (a 7-byte header
gives each frame's length) and reads the one kind of frame it looks for, a method frame
on channel 0, the connection's own. Every other frame is skipped by its length, unread:
a job's frames cost the tap one header each.
"""

import asyncio
import struct
import time
from collections.abc import Callable
from typing import Any, cast

from aiormq.connection import TransportFactory
from aiormq.exceptions import AMQPConnectionError
from structlog.typing import FilteringBoundLogger
from yarl import URL

_HEADER = struct.Struct(">BHI")  # frame type, channel, payload size
_HEADER_BYTES = _HEADER.size
_METHOD_FRAME = 1
_FRAME_END = 1  # the 0xCE octet after each payload
# (class id, method id) of the frames the tap looks for (AMQP 0-9-1, RabbitMQ extension).
_BLOCKED = (10, 60)
_UNBLOCKED = (10, 61)
_METHOD_IDS = struct.Struct(">HH")


class FrameTap:
    """Follows the frames of one connection's incoming bytes; calls `on_blocked(reason)`
    and `on_unblocked()` for the broker's `connection.blocked` / `unblocked`."""

    __slots__ = (
        "_on_blocked",
        "_on_unblocked",
        "_pending",
        "_skip",
        "last_read",
        "lost",
        "started",
        "transport",
    )

    def __init__(self, on_blocked: Callable[[str], None], on_unblocked: Callable[[], None]) -> None:
        self._on_blocked = on_blocked
        self._on_unblocked = on_unblocked
        # When the broker last sent a byte (time.monotonic), and the socket it came on:
        # a link that stays silent past its heartbeat is cut here (ConsumerLink).
        self.last_read = time.monotonic()
        self.transport: asyncio.Transport | None = None
        self._skip = 0  # bytes of the current frame still to come, to pass unread
        self._pending = b""  # the start of a header or of a channel-0 method frame
        # Bytes that are not frames (an AMQP protocol header: the broker refused the
        # version): the tap stops following and sees nothing more on this connection.
        self.lost = False
        self.started = False  # any bytes seen yet

    def feed(self, data: bytes) -> None:
        # On every chunk the broker sends: kept to a header read per frame.
        self.last_read = time.monotonic()
        if self.lost:
            return
        size = len(data)
        start = self._skip
        if start >= size:  # inside a large frame, the usual case for a big job
            self._skip = start - size
            return
        self._skip = 0
        if self._pending:
            if start:  # cannot be: a pending header leaves nothing to skip
                self.lost = True
                return
            data = self._pending + data
            size = len(data)
            self._pending = b""
        elif start == 0 and data[:4] == b"AMQP" and not self.started:
            self.lost = True  # the broker refused the protocol version: no frames follow
            return
        self.started = True
        unpack = _HEADER.unpack_from
        while start + _HEADER_BYTES <= size:
            frame_type, channel, length = unpack(data, start)
            end = start + _HEADER_BYTES + length + _FRAME_END
            if channel == 0 and frame_type == _METHOD_FRAME:
                if end > size:
                    break  # kept whole in `_pending`, below
                self._method(data[start + _HEADER_BYTES : end - _FRAME_END])
            elif end > size:
                self._skip = end - size
                return
            start = end
        if start < size:
            self._pending = data[start:]

    def _method(self, payload: bytes) -> None:
        if len(payload) < _METHOD_IDS.size:
            return
        ids = _METHOD_IDS.unpack_from(payload)
        if ids == _BLOCKED:
            # The reason is a short string: one length octet, then the text.
            length = payload[4] if len(payload) > 4 else 0
            self._on_blocked(payload[5 : 5 + length].decode("utf-8", "replace"))
        elif ids == _UNBLOCKED:
            self._on_unblocked()


class _TappedProtocol(asyncio.StreamReaderProtocol):
    """asyncio's stream protocol, showing each chunk to a `FrameTap` first."""

    def __init__(self, reader: asyncio.StreamReader, frame_tap: FrameTap) -> None:
        super().__init__(reader)
        self.frame_tap = frame_tap

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream's transport (asyncio's, uvloop's, TLS's): all can `abort()`.
        self.frame_tap.transport = cast(asyncio.Transport, transport)
        super().connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self.frame_tap.feed(data)
        super().data_received(data)


class TappedTransport(TransportFactory):
    """Opens aiormq's socket as its own TCP and TLS factories do, with a `FrameTap`
    (made by `new_tap()`, one per connection) on the incoming bytes."""

    def __init__(self, new_tap: Callable[[], FrameTap]) -> None:
        self.new_tap = new_tap

    async def create(
        self, url: URL, **kwargs: Any
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        provider = kwargs.pop("ssl_context_provider", None)
        ssl = None
        if url.scheme == "amqps" and provider is not None:
            ssl = await provider.get_context()
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(loop=loop)
        protocol = _TappedProtocol(reader, self.new_tap())
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


class BrokerFlow:
    """Whether the broker lets the worker's connection publish; new deliveries wait
    (`admit`) while it does not. `on_change()` runs after each change, for readiness.

    `tap()` makes the `FrameTap` of a new connection: only the latest one's frames
    count (a blocked frame of a connection since replaced says nothing about the new one).
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
        self._tap: FrameTap | None = None

    def tap(self) -> FrameTap:
        tap: FrameTap

        def blocked(reason: str) -> None:
            if tap is self._tap:
                self.blocked_by(reason)

        def unblocked() -> None:
            if tap is self._tap:
                self.release("unblocked by the broker")

        tap = self._tap = FrameTap(blocked, unblocked)
        return tap

    @property
    def current_tap(self) -> FrameTap | None:
        """The tap of the connection made last."""
        return self._tap

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
