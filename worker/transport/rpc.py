"""The RPC core of the worker's producers, shared by `PromptClient` and `rerender --broker`.

One connection, one channel with publisher confirms, and one exclusive reply queue
whose name the caller chooses. `publish` sends a job body to the request queue with
`reply_to` naming that queue and the caller's correlation id, persistent and
mandatory, and returns once the broker has confirmed it; a request queue that does not
exist raises aiormq's `PublishError` (the broker returned the job), a refusal such as
a full queue its `DeliveryError`. Every reply is handed to `on_reply` with its
correlation id: matching replies to requests is the caller's business (a future per
call for the client, a sequence number per input line for rerender).

Publishing and consuming go straight to aiormq's channel under aio-pika's: aio-pika's
message objects cost a producer CPU per job for nothing it uses (docs/PERFORMANCE.md,
"The transport's hot path"). With several addresses (a cluster's nodes, comma-separated) the
link connects to the first that answers; a robust link then reconnects round all of
them (`RotatingConnection`), not only to the node it lost. On a robust connection
aio-pika restores the channel and re-declares the reply queue after a reconnect; the
consumer, which it does not know about, is registered again each time the channel
reopens. Should aio-pika fail to restore a channel the broker closed while the
connection stays up, the link drops the connection to have it restored
(`ChannelWatch`).

A reply queue deleted under the link (by an operator, say) cancels its consumer: the
link declares the queue again and consumes it, retrying with growing pauses. Replies
the worker sent meanwhile went nowhere, so `on_resumed` runs whenever the consumer is
back (after a reconnect, a reopened channel or a re-declared queue), for the owner to
publish again what is still waiting.
"""

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractQueue
from aiormq.abc import DeliveredMessage
from yarl import URL

from worker.transport.addresses import SEPARATOR, connect_first
from worker.transport.channel_watch import ChannelWatch
from worker.transport.retry import backoff
from worker.transport.rotation import RotatingConnection

# A reply's correlation id (None when the worker sent none) and its body.
OnReply = Callable[[str | None, bytes], None]


class RpcLink:
    """The connection, channel and reply queue of one producer."""

    def __init__(
        self,
        url: str | URL,
        request_queue: str,
        reply_queue: str,
        on_reply: OnReply,
        *,
        robust: bool,
        connect_kwargs: dict[str, Any] | None = None,
        on_resumed: Callable[[], None] | None = None,
    ) -> None:
        """`connect_kwargs`: what `transport.tls.connect_kwargs` built for the URL;
        `on_resumed`: runs when the reply consumer is back after it was lost."""
        self.url = url
        self.connect_kwargs = connect_kwargs or {}
        self.request_queue = request_queue
        self.reply_queue = reply_queue
        self.robust = robust
        self._on_reply = on_reply
        self._connection: AbstractConnection | None = None
        self._channel: AbstractChannel | None = None
        self._queue: AbstractQueue | None = None
        self._on_resumed = on_resumed
        self._consumer_tag: str | None = None
        # aiormq's channel whose consumer cancellations the link listens to.
        self._watched: Any = None
        self._consuming_again: asyncio.Task[None] | None = None
        self._restore_watch = ChannelWatch(self._wants_channel_back)
        self._closing = False

    @property
    def connection(self) -> AbstractConnection:
        if self._connection is None:
            raise RuntimeError("the link is not open")
        return self._connection

    @property
    def channel(self) -> AbstractChannel:
        if self._channel is None:
            raise RuntimeError("the link is not open")
        return self._channel

    @property
    def is_open(self) -> bool:
        return self._channel is not None and self._queue is not None

    async def open(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Connect, open the channel, declare the reply queue and consume it."""

        addresses = str(self.url).split(SEPARATOR)

        async def attempt(url: str) -> AbstractConnection:
            if not self.robust:
                plain: AbstractConnection = await aio_pika.connect(
                    url, timeout=timeout, **self.connect_kwargs
                )
                return plain
            # Reconnects go round every address, from the one that answered first.
            first = addresses.index(url)
            order = [URL(address) for address in addresses[first:] + addresses[:first]]
            connection = RotatingConnection(order, **self.connect_kwargs)
            try:
                await connection.connect(timeout)
            except BaseException:
                await connection.close()
                raise
            return connection

        # Several addresses (a cluster's nodes): the first that answers.
        self._connection = await connect_first(addresses, attempt)
        # on_return_raises: a job published to a queue that does not exist is an
        # error, not a silent drop.
        channel = await self._connection.channel(publisher_confirms=True, on_return_raises=True)
        # Declared through aio-pika so that a robust channel re-declares it (same name,
        # so requests already out keep their reply_to) before reopen_callbacks run.
        self._queue = await channel.declare_queue(
            self.reply_queue, exclusive=True, auto_delete=True
        )
        if isinstance(channel, aio_pika.RobustChannel):
            channel.reopen_callbacks.add(self._on_reopen)
            channel.close_callbacks.add(self._on_channel_closed)
        await self._consume(channel)
        self._channel = channel

    async def _consume(self, channel: AbstractChannel) -> None:
        underlay = await channel.get_underlay_channel()
        if underlay is not self._watched:
            underlay.on_consumer_cancel_callbacks.add(self._on_cancelled)
            self._watched = underlay
        consume_ok = await underlay.basic_consume(self.reply_queue, self._deliver, no_ack=True)
        self._consumer_tag = consume_ok.consumer_tag

    async def _on_reopen(self, channel: Any) -> None:
        await self._consume(channel)
        self._resumed()

    def _resumed(self) -> None:
        if self._on_resumed is not None:
            self._on_resumed()

    def _on_cancelled(self, frame: Any) -> None:
        """The broker cancelled the reply consumer: the reply queue was deleted."""
        if frame.consumer_tag != self._consumer_tag or self._closing:
            return
        self._consumer_tag = None
        if self._consuming_again is None or self._consuming_again.done():
            self._consuming_again = asyncio.ensure_future(self._declare_and_consume())

    async def _declare_and_consume(self) -> None:
        """Declare the reply queue again and consume it, until that works or the channel
        closes (a refused declaration closes it: its restore then consumes again)."""
        failures = 0
        while not self._closing and self._consumer_tag is None:
            channel, queue = self._channel, self._queue
            if channel is None or queue is None or channel.is_closed:
                return
            try:
                await queue.declare()
                await self._consume(channel)
            except Exception:
                await asyncio.sleep(backoff(failures))
                failures += 1
            else:
                self._resumed()

    def _wants_channel_back(self) -> bool:
        # Whether the channel is back, ChannelWatch checks itself.
        return not self._closing

    def _on_channel_closed(self, sender: Any, *_: Any) -> None:
        channel, connection = self._channel, self._connection
        if channel is not None and sender is channel and connection is not None:
            self._restore_watch.closed(channel, connection)

    async def _deliver(self, message: DeliveredMessage) -> None:
        self._on_reply(message.header.properties.correlation_id, message.body)

    async def publish(
        self,
        body: bytes,
        correlation_id: str,
        *,
        message_id: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> None:
        """Publish a job with reply_to set; returns once the broker confirmed it."""
        if self._channel is None:
            raise RuntimeError("the link is not open")
        if self._channel.is_closed:
            # As aio-pika's own publish does: a robust channel that is down fails here
            # rather than waiting, and the caller decides whether to send again.
            raise aiormq.exceptions.ChannelInvalidStateError(f"{self._channel!r} closed")
        underlay = await self._channel.get_underlay_channel()
        await underlay.basic_publish(
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
            ),
            mandatory=True,
            timeout=timeout,
        )

    async def close(self) -> None:
        self._closing = True
        self._restore_watch.cancel()
        if self._consuming_again is not None:
            self._consuming_again.cancel()
            with contextlib.suppress(BaseException):
                await self._consuming_again
        connection, self._connection = self._connection, None
        self._channel = self._queue = None
        if connection is not None:
            await connection.close()
