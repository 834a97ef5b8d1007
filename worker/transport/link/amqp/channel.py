"""One AMQP channel of the worker's own connection (`connection.AmqpConnection`).

The synchronous methods (open, QoS, consume, cancel, declarations, close) wait for their
reply one at a time. Publishes are not synchronous: each gets the channel's next
publish sequence number and a future its confirm settles, `basic.ack` with the frame,
`basic.nack` with `DeliveryError`, a `basic.return` before it with `PublishError`. A
channel that closes fails whatever waits on it with the reason, the futures of
`closing` get it too, and the handlers of its deliveries are cancelled.
"""

import asyncio
import itertools
import os
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, cast

from aiormq.abc import AbstractChannel, DeliveredMessage
from aiormq.exceptions import ChannelInvalidStateError, DeliveryError, PublishError
from pamqp import commands
from pamqp.body import ContentBody
from pamqp.header import ContentHeader

from worker.transport.link.amqp import errors
from worker.transport.link.amqp.closing import Closable, Closing
from worker.transport.link.amqp.wire import FrameCodec

Basic = commands.Basic
Consumer = Callable[[DeliveredMessage], Awaitable[None]]
OnCancel = Callable[[Any], None]
_CONSUMER_TAGS = itertools.count(1)
_CONTENT_METHODS = (Basic.Deliver, Basic.Return, Basic.GetOk)


class Carrier(Protocol):
    """What a channel needs of its connection (`connection.AmqpConnection`)."""

    codec: FrameCodec
    frame_max: int

    def write(self, data: bytes) -> None: ...

    def forget(self, channel: "AmqpChannel") -> None: ...


class _Content:
    """A message arriving in frames: its method, then a header, then body frames."""

    __slots__ = ("header", "method", "parts", "still")

    def __init__(self, method: Any) -> None:
        self.method = method
        self.header: ContentHeader | None = None
        self.parts: list[bytes] = []
        self.still = 0


class AmqpChannel(Closable):
    """A channel: what the worker's consumer and publishers call."""

    def __init__(
        self,
        connection: Carrier,
        number: int,
        *,
        publisher_confirms: bool,
    ) -> None:
        self.connection = connection
        self.number = number
        self.publisher_confirms = publisher_confirms
        self.on_consumer_cancel_callbacks: set[OnCancel] = set()
        self.consumers: dict[str, Consumer] = {}
        self._loop = asyncio.get_running_loop()
        self._encode = connection.codec.encode
        self._body_max = connection.frame_max - 8  # a body frame's payload
        self._one_call = asyncio.Lock()
        self._reply: asyncio.Future[Any] | None = None
        self._reply_types: tuple[type, ...] = ()
        self._sequence = 0
        # Unconfirmed publishes, by sequence number: their future and message id.
        self._unconfirmed: dict[int, tuple[asyncio.Future[Any], str | None]] = {}
        self._sequence_of: dict[str, int] = {}  # returnable publishes' message ids
        self._content: _Content | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.ended = Closing()

    def __repr__(self) -> str:
        return f"<AmqpChannel #{self.number} of {self.connection!r}>"

    # -- the caller's side ------------------------------------------------------------

    async def open(self) -> None:
        await self._call(commands.Channel.Open(), commands.Channel.OpenOk)
        if self.publisher_confirms:
            await self._call(commands.Confirm.Select(), commands.Confirm.SelectOk)

    async def basic_qos(self, *, prefetch_count: int, global_: bool = False) -> None:
        await self._call(Basic.Qos(prefetch_count=prefetch_count, global_=global_), Basic.QosOk)

    async def basic_consume(
        self, queue: str, consumer_callback: Consumer, *, consumer_tag: str | None = None
    ) -> Basic.ConsumeOk:
        # Registered before it is asked for: the first deliveries may follow the
        # broker's consume-ok in the same read, before this coroutine resumes.
        tag = consumer_tag or f"ctag{os.getpid()}.{next(_CONSUMER_TAGS)}"
        self.consumers[tag] = consumer_callback
        try:
            return cast(
                Basic.ConsumeOk,
                await self._call(Basic.Consume(queue=queue, consumer_tag=tag), Basic.ConsumeOk),
            )
        except BaseException:
            self.consumers.pop(tag, None)
            raise

    async def basic_cancel(self, consumer_tag: str) -> None:
        await self._call(Basic.Cancel(consumer_tag=consumer_tag), Basic.CancelOk)
        self.consumers.pop(consumer_tag, None)

    async def exchange_declare(
        self, exchange: str, *, exchange_type: str = "direct", durable: bool = False
    ) -> None:
        await self._call(
            commands.Exchange.Declare(
                exchange=exchange, exchange_type=exchange_type, durable=durable
            ),
            commands.Exchange.DeclareOk,
        )

    async def queue_declare(
        self, queue: str, *, durable: bool = False, arguments: dict[str, Any] | None = None
    ) -> commands.Queue.DeclareOk:
        return cast(
            commands.Queue.DeclareOk,
            await self._call(
                commands.Queue.Declare(queue=queue, durable=durable, arguments=arguments),
                commands.Queue.DeclareOk,
            ),
        )

    async def queue_bind(self, queue: str, exchange: str, routing_key: str = "") -> None:
        await self._call(
            commands.Queue.Bind(queue=queue, exchange=exchange, routing_key=routing_key),
            commands.Queue.BindOk,
        )

    async def basic_publish(
        self,
        body: bytes,
        *,
        routing_key: str,
        properties: Basic.Properties,
        exchange: str = "",
        mandatory: bool = False,
    ) -> Any:
        """Publish, and with publisher confirms wait for the broker's confirm: the
        `basic.ack`, or `DeliveryError` (nack), `PublishError` (returned), or why the
        channel closed meanwhile."""
        self._check_open()
        encode, number = self._encode, self.number
        frames = [
            encode(
                Basic.Publish(exchange=exchange, routing_key=routing_key, mandatory=mandatory),
                number,
            ),
            encode(ContentHeader(0, len(body), properties), number),
        ]
        step = self._body_max
        if len(body) <= step:
            frames.append(encode(ContentBody(body), number))
        else:
            for start in range(0, len(body), step):
                frames.append(encode(ContentBody(body[start : start + step]), number))
        # Written first: a publish the socket refuses has no sequence number. No frame
        # can arrive between the two steps.
        self.connection.write(b"".join(frames))
        if not self.publisher_confirms:
            return None
        self._sequence += 1
        confirmed: asyncio.Future[Any] = self._loop.create_future()
        message_id = properties.message_id if mandatory else None
        if message_id:
            self._sequence_of[message_id] = self._sequence
        self._unconfirmed[self._sequence] = (confirmed, message_id)
        return await confirmed

    async def basic_ack(self, delivery_tag: int, *, multiple: bool = False) -> None:
        self._send(Basic.Ack(delivery_tag, multiple))

    async def basic_nack(
        self, delivery_tag: int, *, multiple: bool = False, requeue: bool = True
    ) -> None:
        self._send(Basic.Nack(delivery_tag, multiple, requeue))

    async def basic_reject(self, delivery_tag: int, *, requeue: bool = True) -> None:
        self._send(Basic.Reject(delivery_tag, requeue))

    async def close(self) -> None:
        """Close the channel (the broker's close-ok awaited); nothing if closed already."""
        if self.is_closed:
            return
        try:
            await self._call(
                commands.Channel.Close(200, "closed by the worker", 0, 0), commands.Channel.CloseOk
            )
        except Exception:
            if not self.is_closed:
                raise
        self.closed(None)

    # -- the connection's side -------------------------------------------------------

    def frame_received(self, frame: Any) -> None:
        """One frame for this channel, in the order the broker sent it."""
        kind = type(frame)
        content = self._content
        if content is not None:
            if kind is ContentBody:
                content.parts.append(frame.value)
                content.still -= len(frame.value)
                if content.still <= 0:
                    self._content_complete(content)
                return
            if kind is ContentHeader:
                content.header = frame
                content.still = frame.body_size
                if content.still <= 0:
                    self._content_complete(content)
                return
        if kind is Basic.Ack or kind is Basic.Nack:
            self._confirm(frame)
        elif kind in _CONTENT_METHODS:
            self._content = _Content(frame)
        elif kind is commands.Channel.Close:
            self._send(commands.Channel.CloseOk())
            self.closed(errors.channel_closed(frame))
        elif kind is Basic.Cancel:
            self._cancelled_by_broker(frame)
        elif self._reply is not None and isinstance(frame, self._reply_types):
            reply, self._reply = self._reply, None
            if not reply.done():
                reply.set_result(frame)
        elif kind is commands.Channel.Flow:
            self._send(commands.Channel.FlowOk(frame.active))

    def closed(self, why: BaseException | None) -> None:
        """The channel is closed (by the broker, the connection's loss, or the worker)."""
        # The observers first: they learn of the close before whatever waits on the
        # channel wakes up with the failure.
        if not self.ended.close(why):
            return
        self.connection.forget(self)
        failure = why or ChannelInvalidStateError(f"{self!r} closed")
        if self._reply is not None and not self._reply.done():
            self._reply.set_exception(failure)
        for confirmed, _ in self._unconfirmed.values():
            if not confirmed.done():
                confirmed.set_exception(failure)
        self._unconfirmed.clear()
        self._sequence_of.clear()
        self.consumers.clear()
        # The deliveries' handlers end with the channel (CancelledError): a delivery
        # can no longer be settled, and the broker hands it out again. Only after those
        # woken by the failures above have seen them (why the channel closed: a reply
        # too large, a declaration refused), as aiormq does it.
        self._loop.call_soon(self._cancel_handlers)

    # -- inside ---------------------------------------------------------------------

    def _check_open(self) -> None:
        if self.is_closed:
            # As aiormq does; why it closed is `closed_by`, raised once already.
            raise ChannelInvalidStateError(f"{self!r} closed ({self.closed_by!r})")

    def _send(self, method: Any) -> None:
        self._check_open()
        self.connection.write(self._encode(method, self.number))

    async def _call(self, method: Any, *replies: type) -> Any:
        """Send a synchronous method and return the broker's reply."""
        async with self._one_call:
            self._check_open()
            reply: asyncio.Future[Any] = self._loop.create_future()
            self._reply, self._reply_types = reply, replies
            self.connection.write(self._encode(method, self.number))
            try:
                return await reply
            finally:
                if self._reply is reply:
                    self._reply = None

    def _content_complete(self, content: _Content) -> None:
        self._content = None
        parts = content.parts
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        header = content.header
        assert header is not None
        # The dataclass types its channel as aiormq's; the worker's code reads it as ours.
        message = DeliveredMessage(content.method, header, body, cast(AbstractChannel, self))
        method = content.method
        if type(method) is Basic.Deliver:
            consumer = self.consumers.get(method.consumer_tag or "")
            if consumer is not None:
                task = self._loop.create_task(cast(Any, consumer(message)))
                self._tasks.add(task)
                task.add_done_callback(self._consumer_done)
        elif type(method) is Basic.Return:
            self._returned(message, method)

    def _cancel_handlers(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    def _consumer_done(self, task: "asyncio.Task[None]") -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # the consumer logs its own failures

    def _returned(self, message: DeliveredMessage, frame: Basic.Return) -> None:
        message_id = message.header.properties.message_id
        sequence = self._sequence_of.pop(message_id, None) if message_id else None
        if sequence is None:
            return
        confirmed, _ = self._unconfirmed.pop(sequence, (None, None))
        if confirmed is not None and not confirmed.done():
            # The broker's ack for it follows; nothing is left to settle then.
            confirmed.set_exception(PublishError(message, frame))

    def _confirm(self, frame: Any) -> None:
        tag = frame.delivery_tag
        if frame.multiple:
            sequences = list(itertools.takewhile(lambda s: s <= tag, self._unconfirmed))
        else:
            sequences = [tag]
        nacked = type(frame) is Basic.Nack
        for sequence in sequences:
            entry = self._unconfirmed.pop(sequence, None)
            if entry is None:
                continue
            confirmed, message_id = entry
            if message_id is not None:
                self._sequence_of.pop(message_id, None)
            if confirmed.done():
                continue
            if nacked:
                confirmed.set_exception(DeliveryError(None, frame))
            else:
                confirmed.set_result(frame)

    def _cancelled_by_broker(self, frame: Basic.Cancel) -> None:
        if frame.consumer_tag is not None:
            self.consumers.pop(frame.consumer_tag, None)
        if not frame.nowait:
            self._send(Basic.CancelOk(frame.consumer_tag))
        for callback in list(self.on_consumer_cancel_callbacks):
            callback(frame)
