"""The broker link of the worker's producers, shared by `PromptClient`, `rerender --broker`
and (its connection step) `replay-dead`.

One connection, one channel with publisher confirms, and one exclusive reply queue
whose name the caller chooses. `publish` sends a job body to the request queue with
`reply_to` naming that queue and the caller's correlation id, persistent and
mandatory, and returns once the broker has confirmed it; a request queue that does not
exist raises aiormq's `PublishError` (the broker returned the job), a refusal such as
a full queue its `DeliveryError`. Every reply is handed to `on_reply` with its
correlation id: matching replies to requests is the caller's business (a future per
call for the client, a sequence number per input line for rerender).

The link is aiormq's public connection and channel, with no robust layer under it:
it keeps itself up with a loop of its own (`_keep_up`). Losses reach that loop through
the public `closing` futures of the connection and the channel, and through the
broker's cancellation of the reply consumer (the reply queue was deleted). Then:

* a connection lost, or an attempt that failed, moves on to the next address of the
  list (a cluster's nodes, comma-separated), round the list, with pauses growing
  (`retry.Backoff`, from the URL's `reconnect_interval`, jittered) between failed
  attempts; the first attempt after a loss goes at once to the next node;
* a channel the broker closed under a connection that stays up (a job it refused
  outright, a declaration it refused) is opened again on the same connection;
* the reply queue is declared and consumed, after which `on_resumed` runs: replies the
  worker sent meanwhile went nowhere, and the owner publishes again what is still
  waiting. On a channel of the same connection the queue keeps its name (the connection
  still owns it, unless it was deleted). On a new connection it gets a new one, the
  caller's name with the connection's number (`<name>.2`, ...): the requests published
  again name it in their `reply_to`. The old name could not be trusted again: RabbitMQ
  3.10 removes a dead node's queues on every surviving node by listing their names,
  then deleting the records of those names in transactions of their own, so a queue
  declared again under the old name on a survivor between one node's deletion and
  another's loses its record to the later one while its consumer goes on, and every
  reply from then on is unroutable (the worker settles it as answered into nowhere).

Refused credentials end the link at once (`on_failed`): the nodes of a cluster share
their users, and retrying the same password can only fail again. `Reconnect` says how
patient a link is: the client waits for ever (its calls have their own timeouts), a
rerender run gives up after a few rounds of the list, so that a broker that is gone
ends the run with a message rather than a hang.
"""

import asyncio
import contextlib
import math
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

import aiormq
from aiormq.abc import AbstractChannel, AbstractConnection, DeliveredMessage
from aiormq.exceptions import ChannelClosed, ChannelLockedResource, ChannelNotFoundEntity
from yarl import URL

from worker.transport.link.addresses import SEPARATOR, connect_first
from worker.transport.link.broker_failures import broker_address, is_access_refused
from worker.transport.retry import Backoff

# A reply's correlation id (None when the worker sent none) and its body.
OnReply = Callable[[str | None, bytes], None]

# Pauses between failed attempts: from the URL's `reconnect_interval` (or this), doubling
# up to the cap. Producers have callers waiting, hence a short first pause and cap.
FIRST_PAUSE = 1.0
MAX_PAUSE = 5.0
# How long one attempt to reach a node may take before it counts as failed (a node that
# is cut off, rather than refusing, would otherwise hold the loop for aiormq's 60 s).
ATTEMPT_TIMEOUT = 10.0


class LinkDown(ConnectionError):
    """The link is between a loss and its return: nothing can be published right now."""


@dataclass(frozen=True, slots=True)
class Reconnect:
    """How patient a link is after a loss.

    `give_up_after`: consecutive failed attempts after which the link ends (None: it
    never does). `channel_errors_final`: a channel the broker closed under a connection
    that stays up ends the link rather than being opened again.
    """

    give_up_after: int | None = None
    channel_errors_final: bool = False


def passes_soon(reason: ChannelClosed, reply_queue: str) -> bool:
    """A channel the broker closed over what the next attempt mends: a queue still held
    by a lost connection of ours (RESOURCE_LOCKED), or our own reply queue found missing
    while the cluster cleans up after the node that held it died (NOT_FOUND naming it:
    it is declared again)."""
    if isinstance(reason, ChannelLockedResource):
        return True
    return isinstance(reason, ChannelNotFoundEntity) and repr(reply_queue) in str(reason)


def first_pause(url: str | URL) -> float:
    """The first pause between failed attempts: the URL's `reconnect_interval`, if any."""
    value = URL(str(url)).query.get("reconnect_interval")
    try:
        return float(value) if value is not None else FIRST_PAUSE
    except ValueError:
        return FIRST_PAUSE


async def open_connection(
    url: str,
    connect_kwargs: dict[str, Any],
    timeout: float | None = None,  # noqa: ASYNC109
) -> AbstractConnection:
    """One attempt on one address. `connect_kwargs`: what `tls.connect_kwargs` built."""
    async with asyncio.timeout(timeout):
        connection: AbstractConnection = await aiormq.connect(
            url, context=connect_kwargs.get("ssl_context")
        )
    return connection


async def connect_any(
    addresses: list[str],
    connect_kwargs: dict[str, Any],
    timeout: float | None = None,  # noqa: ASYNC109
) -> tuple[int, AbstractConnection]:
    """The first address that answers, in order (`connect_first`): its index and its
    connection. Raises as `connect_first` does."""

    async def attempt(url: str) -> tuple[int, AbstractConnection]:
        return addresses.index(url), await open_connection(url, connect_kwargs, timeout)

    return await connect_first(addresses, attempt)


class RpcLink:
    """The connection, channel and reply queue of one producer, kept up by its own loop."""

    def __init__(
        self,
        url: str | URL,
        request_queue: str,
        reply_queue: str,
        on_reply: OnReply,
        *,
        reconnect: Reconnect | None = None,
        connect_kwargs: dict[str, Any] | None = None,
        on_resumed: Callable[[], None] | None = None,
        on_failed: Callable[[BaseException], None] | None = None,
    ) -> None:
        """`reconnect`: how patient the link is (default: for ever); `connect_kwargs`:
        what `transport.tls.connect_kwargs` built for the URL; `on_resumed`: runs when
        the reply consumer is back after it was lost; `on_failed`: runs once when the
        link gives up, with the reason."""
        self.url = str(url)
        self.addresses = self.url.split(SEPARATOR)
        self.connect_kwargs = connect_kwargs or {}
        self.request_queue = request_queue
        # The reply queue's name on the current connection: the caller's on the first,
        # `<name>.<n>` on the n-th (see the module's docstring).
        self.reply_queue = reply_queue
        self._reply_queue_base = reply_queue
        self._connections = 1
        self.reconnect = reconnect or Reconnect()
        self.failure: BaseException | None = None
        self.reconnects = 0
        self._first_pause = first_pause(self.addresses[0])
        self._on_reply = on_reply
        self._on_resumed = on_resumed
        self._on_failed = on_failed
        self._index = 0
        self._connection: AbstractConnection | None = None
        self._channel: AbstractChannel | None = None
        self._consumer_tag: str | None = None
        # Set whenever something is lost; the keeper restores what is missing.
        self._down = asyncio.Event()
        self._keeper: asyncio.Task[None] | None = None
        self._closing = False

    @property
    def connection(self) -> AbstractConnection:
        if self._connection is None:
            raise LinkDown("the link is not connected")
        return self._connection

    @property
    def connected(self) -> bool:
        """Whether the link has a connection that is up (its channel may be reopening)."""
        return self._connection is not None and not self._connection.is_closed

    @property
    def is_up(self) -> bool:
        """Connected, with the channel open and the reply queue consumed."""
        return (
            self.connected
            and self._channel is not None
            and not self._channel.is_closed
            and self._consumer_tag is not None
        )

    @property
    def broker(self) -> str | None:
        """`host:port` of the node the link is connected to; None while it is not."""
        return broker_address(self.addresses[self._index]) if self.connected else None

    @property
    def address(self) -> str:
        """`host:port` of the node in use, or of the one tried last."""
        return broker_address(self.addresses[self._index])

    async def open(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Connect to the first address that answers, open the channel, declare the
        reply queue and consume it; then keep all of it up."""
        self._index, connection = await connect_any(self.addresses, self.connect_kwargs, timeout)
        self._watch_connection(connection)
        await self._set_up_channel(connection)
        self._keeper = asyncio.ensure_future(self._keep_up())

    # -- keeping the link up ---------------------------------------------------------

    async def _keep_up(self) -> None:
        # Jittered: producers of a fleet that lost the same node must not come back in step.
        pauses = Backoff(self._first_pause, MAX_PAUSE)
        while True:
            await self._down.wait()
            if self._closing or self.failure is not None:
                return
            self._down.clear()
            try:
                await self._restore()
            except Exception as exc:
                if self._is_final(exc, pauses.failures + 1):
                    self._fail(exc)
                    return
                self._down.set()  # still missing: another attempt after the pause
                await asyncio.sleep(pauses.next())
                continue
            pauses.reset()
            self.reconnects += 1
            if self._on_resumed is not None:
                self._on_resumed()

    def _is_final(self, exc: BaseException, failures: int) -> bool:
        if is_access_refused(exc):
            return True
        limit = self.reconnect.give_up_after
        return limit is not None and failures >= limit

    async def _restore(self) -> None:
        connection = self._connection
        if connection is None or connection.is_closed:
            self._connection = self._channel = None
            self._consumer_tag = None
            # The node just lost, or the one that just failed: try the next one.
            self._index = (self._index + 1) % len(self.addresses)
            url = self.addresses[self._index]
            connection = await open_connection(url, self.connect_kwargs, ATTEMPT_TIMEOUT)
            # A name no node may still be cleaning up after: set before the channel
            # exists, so nothing is published on this connection with the old one.
            self._connections += 1
            self.reply_queue = f"{self._reply_queue_base}.{self._connections}"
            self._watch_connection(connection)
        await self._set_up_channel(connection)

    async def _set_up_channel(self, connection: AbstractConnection) -> None:
        channel = self._channel
        if channel is None or channel.is_closed:
            self._consumer_tag = None
            # on_return_raises: a job published to a queue that does not exist is an
            # error, not a silent drop.
            channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
            channel.on_consumer_cancel_callbacks.add(self._on_cancelled)
            self._watch_channel(channel)
            self._channel = channel
        # The connection's name (`reply_queue`): the same on every channel of it.
        await channel.queue_declare(self.reply_queue, exclusive=True, auto_delete=True)
        # The tag is chosen before asking: the broker's cancel of the consumer (its queue
        # deleted at once) may come in the same read as the consume-ok, and is handled
        # before this call returns.
        tag = self._consumer_tag = f"replies.{uuid.uuid4().hex}"
        await channel.basic_consume(self.reply_queue, self._deliver, no_ack=True, consumer_tag=tag)

    def _watch_connection(self, connection: AbstractConnection) -> None:
        self._connection = connection

        def lost(closing: "asyncio.Future[Any]") -> None:
            _retrieve(closing)
            if connection is self._connection:
                self._down.set()

        connection.closing.add_done_callback(lost)

    def _watch_channel(self, channel: AbstractChannel) -> None:
        def lost(closing: "asyncio.Future[Any]") -> None:
            reason = _retrieve(closing)
            if channel is not self._channel or self._closing:
                return
            if self.reconnect.channel_errors_final and self._broker_closed(reason):
                self._fail(reason)
                return
            self._down.set()

        channel.closing.add_done_callback(lost)

    def _broker_closed(self, reason: BaseException | None) -> TypeGuard[ChannelClosed]:
        """Whether the broker closed the channel under a connection that stays up, over
        something another attempt does not mend (`passes_soon`)."""
        connection = self._connection
        return (
            isinstance(reason, ChannelClosed)
            and not passes_soon(reason, self.reply_queue)
            and connection is not None
            and not connection.is_closed
        )

    def _on_cancelled(self, frame: Any) -> None:
        """The broker cancelled the reply consumer: the reply queue was deleted."""
        if frame.consumer_tag != self._consumer_tag or self._closing:
            return
        self._consumer_tag = None
        self._down.set()

    def _fail(self, exc: BaseException) -> None:
        if self.failure is not None or self._closing:
            return
        self.failure = exc
        if self._on_failed is not None:
            self._on_failed(exc)

    async def _deliver(self, message: DeliveredMessage) -> None:
        self._on_reply(message.header.properties.correlation_id, message.body)

    # -- publishing --------------------------------------------------------------------

    async def publish(
        self,
        body: bytes,
        correlation_id: str,
        *,
        message_id: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
        headers: Mapping[str, str] | None = None,
        expires_after: float | None = None,
    ) -> None:
        """Publish a job with reply_to set; returns once the broker confirmed it.
        `headers`: the job's trace context (`traceparent`, `tracestate`), if any;
        `expires_after`: seconds the job may wait in the request queue before the broker
        drops it undelivered (the message's `expiration`), None: no limit.

        Raises `LinkDown` at once while the link is down, until its reply queue is
        consumed again: the owner publishes again when `on_resumed` runs."""
        channel = self._channel
        # Down until the reply queue is consumed again, too: a job published before then
        # would name a queue that may not exist yet, and its reply be lost.
        if not self.is_up or channel is None or self.failure is not None:
            raise LinkDown(f"no channel to the broker ({self.failure or 'reconnecting'})")
        await channel.basic_publish(
            body,
            routing_key=self.request_queue,
            properties=aiormq.spec.Basic.Properties(
                content_type="application/json",
                delivery_mode=2,  # persistent
                correlation_id=correlation_id,
                reply_to=self.reply_queue,
                # aiormq matches a returned (unroutable) job to its publish by message
                # id, and makes one up when none is given.
                message_id=message_id,
                headers=dict(headers) if headers else None,
                # AMQP's expiration: milliseconds, as text.
                expiration=None if expires_after is None else str(math.ceil(expires_after * 1000)),
            ),
            mandatory=True,
            timeout=timeout,
        )

    async def close(self) -> None:
        self._closing = True
        self._down.set()
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            keeper.cancel()
            with contextlib.suppress(BaseException):
                await keeper
        connection, self._connection = self._connection, None
        self._channel = None
        if connection is not None:
            with contextlib.suppress(Exception):  # already lost: nothing left to close
                await connection.close()


def _retrieve(future: "asyncio.Future[Any]") -> BaseException | None:
    """The exception a closing future ended with (retrieved, so asyncio keeps quiet)."""
    if future.cancelled():
        return None
    return future.exception()
