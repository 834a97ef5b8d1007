"""The worker's own AMQP connection: the socket, the handshake, heartbeats, channels.

`AmqpConnection` is an asyncio protocol. The broker's bytes are cut into frames
(`wire.FrameReader`) and each goes, in order, to the connection itself (channel 0) or
to its channel; frames are written with the connection's codec. What the connection
learns of the broker is told through callbacks and futures the caller owns:
`on_blocked(reason)` / `on_unblocked()` for the broker's resource alarms, `closing`
for the end of the connection (with why), `on_silent(seconds)` just before a link the
broker has stopped talking on is cut.

A silent link is cut after SILENT_INTERVALS heartbeat intervals without a byte: the
broker sends a heartbeat every half interval, so that long means the path is gone
(stalled, a NAT entry dropped without a reset), while the operating system would wait
for TCP's own timeouts. Checked every half interval, the cut comes within two.

Failures are aiormq's exception classes, as aiormq raises them: `AMQPConnectionError`
for a socket that cannot be opened or is lost, `ProbableAuthenticationError` for
refused credentials (403 during the handshake), `AuthenticationError` for a login
mechanism the broker does not offer, `ConnectionClosed` and its kin for the broker's
`connection.close`.
"""

import asyncio
import contextlib
import platform
import ssl
import time
from collections.abc import Callable
from typing import Any

from aiormq.exceptions import (
    AMQPConnectionError,
    AuthenticationError,
    ConnectionClosed,
    ProbableAuthenticationError,
)
from pamqp import commands
from pamqp.heartbeat import Heartbeat
from yarl import URL

from worker import __version__
from worker.transport.link.amqp import errors
from worker.transport.link.amqp.channel import AmqpChannel
from worker.transport.link.amqp.closing import Closable, Closing
from worker.transport.link.amqp.wire import (
    HEARTBEAT,
    PAMQP_CODEC,
    PROTOCOL_HEADER,
    FrameCodec,
    FrameReader,
)

Connection = commands.Connection
DEFAULT_HEARTBEAT = 60  # seconds, as aiormq's (the URL's `heartbeat` sets it)
SILENT_INTERVALS = 1.5
FRAME_MAX = 131072  # the largest frame the worker accepts (RabbitMQ's default)
CLOSE_WAIT = 5.0  # for the broker's close-ok, on a link that may be stalled
_CAPABILITIES = {
    "authentication_failure_close": True,
    "basic.nack": True,
    "connection.blocked": True,
    "consumer_cancel_notify": True,
    "publisher_confirms": True,
}


def _ignore(*_: Any) -> None:
    return None


class AmqpConnection(asyncio.Protocol, Closable):
    """One connection to one broker address."""

    def __init__(
        self,
        url: URL,
        *,
        codec: FrameCodec = PAMQP_CODEC,
        ssl_context: ssl.SSLContext | None = None,
        client_properties: dict[str, Any] | None = None,
        on_blocked: Callable[[str], None] = _ignore,
        on_unblocked: Callable[[], None] = _ignore,
        on_silent: Callable[[float], None] = _ignore,
    ) -> None:
        self.url = url
        self.codec = codec
        self.ssl_context = ssl_context
        self.client_properties = client_properties or {}
        self.on_blocked = on_blocked
        self.on_unblocked = on_unblocked
        self.on_silent = on_silent
        heartbeat = url.query.get("heartbeat", str(DEFAULT_HEARTBEAT))
        self.heartbeat_timeout = int(heartbeat) if heartbeat.isdigit() else DEFAULT_HEARTBEAT
        self.frame_max = FRAME_MAX
        self.server_properties: dict[str, Any] = {}
        self.last_read = time.monotonic()
        self.ended = Closing()
        self.channels: dict[int, AmqpChannel] = {}
        self._loop = asyncio.get_running_loop()
        self._reader = FrameReader(codec.decode)
        self._transport: asyncio.Transport | None = None
        self._handshake: asyncio.Queue[Any] = asyncio.Queue()
        self._opened = False
        self._close_ok: asyncio.Future[None] | None = None
        self._heartbeats: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"<AmqpConnection {self.url.host}:{self.url.port}>"

    # -- the caller's side ------------------------------------------------------------

    async def connect(self) -> None:
        """Open the socket and log in; raises why it could not (see the module)."""
        url = self.url
        tls = url.scheme == "amqps"
        context = self.ssl_context
        if tls and context is None:
            context = ssl.create_default_context()
        try:
            await self._loop.create_connection(
                lambda: self,
                url.host or "localhost",
                url.port or (5671 if tls else 5672),
                ssl=context if tls else None,
            )
        except OSError as exc:  # as aiormq reports it, the `ssl` error chained
            raise AMQPConnectionError(*exc.args) from exc
        try:
            await self._log_in()
        except BaseException as exc:
            self.abort()
            self._closed(exc if isinstance(exc, Exception) else None)
            raise
        if self.heartbeat_timeout > 0 and not self.is_closed:
            self._heartbeats = self._loop.create_task(self._beat())

    async def channel(self, *, publisher_confirms: bool = True) -> AmqpChannel:
        """A new channel; a returned mandatory publish on it raises PublishError."""
        if self.is_closed:
            raise self.closed_by or AMQPConnectionError("the connection is closed")
        number = next(n for n in range(1, len(self.channels) + 2) if n not in self.channels)
        channel = AmqpChannel(self, number, publisher_confirms=publisher_confirms)
        self.channels[number] = channel
        try:
            await channel.open()
        except BaseException:
            channel.closed(None)
            raise
        return channel

    async def close(self) -> None:
        """Close the connection: `connection.close`, the broker's close-ok (bounded),
        then the socket."""
        if self.is_closed:
            return
        transport = self._transport
        if transport is not None and self._opened and not transport.is_closing():
            self._close_ok = self._loop.create_future()
            self.write(self.codec.encode(Connection.Close(200, "closed by the worker", 0, 0), 0))
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self._close_ok), CLOSE_WAIT)
        self._closed(None)
        if transport is not None:
            transport.close()

    def abort(self) -> None:
        """Drop the socket at once (a stalled link): the connection closes as lost."""
        if self._transport is not None:
            self._transport.abort()

    def write(self, data: bytes) -> None:
        transport = self._transport
        if transport is None or self.is_closed:
            raise self.closed_by or AMQPConnectionError("the connection is closed")
        transport.write(data)

    def forget(self, channel: AmqpChannel) -> None:
        if self.channels.get(channel.number) is channel:
            del self.channels[channel.number]

    # -- asyncio's side ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        transport.write(PROTOCOL_HEADER)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        self.last_read = time.monotonic()
        try:
            frames = self._reader.feed(data)
        except Exception as exc:
            self._lost(exc)
            return
        channels = self.channels
        for number, frame in frames:
            if number:
                channel = channels.get(number)
                if channel is not None:
                    channel.frame_received(frame)
            else:
                self._connection_frame(frame)

    def connection_lost(self, exc: Exception | None) -> None:
        why = AMQPConnectionError(
            "Server connection unexpectedly closed"
            if exc is None
            else f"Server connection error: {exc!r}"
        )
        if exc is not None:
            why.__cause__ = exc
        self._lost(why)

    # -- inside ---------------------------------------------------------------------

    async def _log_in(self) -> None:
        start = await self._next_handshake_frame(Connection.Start)
        self.server_properties = dict(start.server_properties or {})
        mechanism = self.url.query.get("auth", "plain").upper()
        offered = str(start.mechanisms or "").split()
        if mechanism not in offered or mechanism not in ("PLAIN", "EXTERNAL"):
            raise AuthenticationError(start.mechanisms, ["PLAIN", "EXTERNAL"])
        response = ""
        if mechanism == "PLAIN":
            user = self.url.user if self.url.user is not None else "guest"
            password = self.url.password if self.url.password is not None else "guest"
            response = f"\0{user}\0{password}"
        properties: dict[str, Any] = {
            "platform": f"Python {platform.python_version()}",
            "product": "prompt-worker",
            "version": __version__,
            "capabilities": _CAPABILITIES,
        }
        properties.update(self.client_properties)
        self._write_handshake(Connection.StartOk(properties, mechanism, response))
        tune = await self._next_handshake_frame(Connection.Tune)
        if tune.frame_max:
            self.frame_max = min(FRAME_MAX, tune.frame_max)
        self._write_handshake(
            Connection.TuneOk(tune.channel_max, self.frame_max, self.heartbeat_timeout)
        )
        vhost = self.url.path[1:] if len(self.url.path) > 1 else "/"
        self._write_handshake(Connection.Open(vhost))
        await self._next_handshake_frame(Connection.OpenOk)

    def _write_handshake(self, method: Any) -> None:
        assert self._transport is not None
        self._transport.write(self.codec.encode(method, 0))

    async def _next_handshake_frame(self, expected: type) -> Any:
        frame = await self._handshake.get()
        if isinstance(frame, BaseException):
            raise frame
        if isinstance(frame, Connection.Close):
            with contextlib.suppress(Exception):
                self._write_handshake(Connection.CloseOk())
            if frame.reply_code == 403:
                raise ProbableAuthenticationError(frame.reply_text)
            raise ConnectionClosed(frame.reply_code, frame.reply_text)
        if not isinstance(frame, expected):
            raise AMQPConnectionError(f"expected {expected.__name__}, got {frame!r}")
        return frame

    def _connection_frame(self, frame: Any) -> None:
        kind = type(frame)
        if kind is Heartbeat:
            return
        if not self._opened:
            # Open at once: the broker's next frames may be in the same read, before
            # `connect` resumes, and are the open connection's.
            self._opened = kind is Connection.OpenOk
            self._handshake.put_nowait(frame)
        elif kind is Connection.Blocked:
            self.on_blocked(str(frame.reason or ""))
        elif kind is Connection.Unblocked:
            self.on_unblocked()
        elif kind is Connection.Close:
            with contextlib.suppress(Exception):
                self.write(self.codec.encode(Connection.CloseOk(), 0))
            self._lost(errors.connection_closed(frame))
        elif kind is Connection.CloseOk and self._close_ok and not self._close_ok.done():
            self._close_ok.set_result(None)

    def _lost(self, why: Exception) -> None:
        if not self._opened and not self.is_closed:
            self._handshake.put_nowait(why)
        if self._close_ok is not None and not self._close_ok.done():
            self._close_ok.set_result(None)  # closing anyway: the socket is gone
            self._closed(None)
        else:
            self._closed(why)
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()

    def _closed(self, why: BaseException | None) -> None:
        # The observers first, as the channel's (`AmqpChannel.closed`).
        if not self.ended.close(why):
            return
        if self._heartbeats is not None:
            self._heartbeats.cancel()
        for channel in list(self.channels.values()):
            channel.closed(why)

    async def _beat(self) -> None:
        """Send a heartbeat every half interval; cut a link silent for SILENT_INTERVALS."""
        interval = self.heartbeat_timeout / 2
        bound = self.heartbeat_timeout * SILENT_INTERVALS
        while not self.is_closed:
            await asyncio.sleep(interval)
            silent = time.monotonic() - self.last_read
            if silent > bound:
                self.on_silent(silent)
                self.abort()  # the connection is lost, and closes
                return
            with contextlib.suppress(Exception):
                self.write(HEARTBEAT)
