"""Reading the archive stream over AMQP 0-9-1 (SPEC §12, "Reading it").

A stream is read through aiormq's public channel API: `basic_qos` (a stream consumer
needs a prefetch), `basic_consume` with the `x-stream-offset` argument (`first`, a
timestamp, an offset number, `last`), and every delivery carries its offset in the
`x-stream-offset` header. Deliveries are acknowledged as they are taken, many at once
(a stream keeps them; the acknowledgement only gives the consumer credit for more).

AMQP has no "where does the stream end now?". `find_end` asks it with a short
consumer from `last` (the stream's last chunk): the highest offset delivered once the
deliveries pause for `settle` seconds. It costs one consumer and the last chunk's
records (bodies not decompressed), and the pause: `settle` (1 s) after the last
delivery, `empty_settle` (3 s) on an empty stream. The pauses are generous because a
shared, loaded broker may take a while to start delivering: a chunk's records come as
one burst, so a record missed by a too-short pause would be one the run never reads.
"""

import asyncio
import datetime
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import aiormq
from aiormq.abc import AbstractChannel, AbstractConnection, DeliveredMessage

from worker.archive.connect import Connect
from worker.archive.record import DEFAULT_STREAM as DEFAULT_STREAM

OFFSET_HEADER = "x-stream-offset"
DEFAULT_PREFETCH = 500
# How long the stream may stay silent before the offset the run reads to: far longer
# than a stream takes to deliver stored records, short of a hung run.
IDLE_TIMEOUT = 30.0


class ArchiveError(Exception):
    """The stream cannot be read: one line for the operator."""


class NoStream(ArchiveError):
    """The broker has no queue of that name (404)."""


@dataclass(frozen=True, slots=True)
class Delivery:
    """One record as the stream delivered it, not yet decompressed."""

    offset: int
    timestamp: datetime.datetime | None
    headers: dict[str, Any]
    body: bytes
    encoding: str | None
    message_id: str | None


def _delivery(message: DeliveredMessage) -> Delivery | None:
    properties = message.header.properties
    headers = dict(properties.headers or {})
    offset = headers.get(OFFSET_HEADER)
    if not isinstance(offset, int):
        return None  # not a stream: see `ArchiveReader._take`
    return Delivery(
        offset=offset,
        timestamp=properties.timestamp,
        headers=headers,
        body=message.body,
        encoding=properties.content_encoding,
        message_id=properties.message_id,
    )


class ArchiveReader:
    """One connection and channel on the broker, reading one stream."""

    def __init__(
        self,
        connect: Connect,
        stream: str,
        *,
        prefetch: int = DEFAULT_PREFETCH,
    ) -> None:
        # Opens the connection: the caller's, which knows the addresses and TLS files.
        self._connect = connect
        self.stream = stream
        self.prefetch = prefetch
        self._connection: AbstractConnection | None = None
        self._channel: AbstractChannel | None = None
        # Deliveries taken but not yet acknowledged: acknowledged together (`multiple`),
        # a quarter of the prefetch at a time or whenever the consumer waits.
        self._unacked = 0
        self._last_tag = 0

    async def __aenter__(self) -> "ArchiveReader":
        self._connection = await self._connect()
        try:
            await self._open_channel()
        except BaseException:
            await self._connection.close()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._connection is not None:
            await self._connection.close()

    async def _open_channel(self) -> AbstractChannel:
        assert self._connection is not None
        channel = await self._connection.channel()
        try:
            await channel.queue_declare(self.stream, passive=True)
        except aiormq.exceptions.ChannelNotFoundEntity:
            raise NoStream(f"no stream {self.stream!r} on the broker (404)") from None
        channel = await self._connection.channel()  # a 404 closed the first one
        await channel.basic_qos(prefetch_count=self.prefetch)
        self._channel = channel
        return channel

    async def _consume(
        self, start: int | str | datetime.datetime, queue: "asyncio.Queue[DeliveredMessage]"
    ) -> str:
        channel = self._channel
        assert channel is not None

        async def on_message(message: DeliveredMessage) -> None:
            queue.put_nowait(message)

        try:
            ok = await channel.basic_consume(
                self.stream, on_message, arguments={OFFSET_HEADER: start}
            )
        except aiormq.exceptions.ChannelPreconditionFailed:
            # A queue of another type refuses the stream offset: it is not the archive.
            raise ArchiveError(f"{self.stream!r} is a queue, not a stream") from None
        assert ok.consumer_tag is not None
        return ok.consumer_tag

    async def _take(self, message: DeliveredMessage) -> Delivery:
        delivery = _delivery(message)
        if delivery is None:
            # A queue, not a stream: leave its message unacknowledged (the broker
            # gives it back when the channel closes), so reading it takes nothing.
            raise ArchiveError(
                f"{self.stream!r} is not a stream (a delivery without {OFFSET_HEADER})"
            )
        if message.delivery_tag is not None:
            self._last_tag = message.delivery_tag
            self._unacked += 1
            if self._unacked * 4 >= self.prefetch:
                await self._ack()
        return delivery

    async def _ack(self) -> None:
        if self._unacked and self._channel is not None:
            await self._channel.basic_ack(self._last_tag, multiple=True)
            self._unacked = 0

    async def _next(
        self, queue: "asyncio.Queue[DeliveredMessage]", within: float
    ) -> DeliveredMessage:
        """The next delivery; raises TimeoutError after `within` seconds without one."""
        if queue.empty():
            await self._ack()  # the broker sends no more until it has them
        async with asyncio.timeout(within):
            return await queue.get()

    async def _finish(self, tag: str) -> None:
        # A fresh channel for the next consumer: deliveries still in flight for this
        # one would otherwise arrive among the next one's.
        assert self._channel is not None
        await self._channel.basic_cancel(tag)
        await self._channel.close()
        self._unacked = 0
        await self._open_channel()

    async def find_end(self, *, settle: float = 1.0, empty_settle: float = 3.0) -> Delivery | None:
        """The stream's last record now (its offset is where a run stops), or None."""
        queue: asyncio.Queue[DeliveredMessage] = asyncio.Queue()
        tag = await self._consume("last", queue)
        last: Delivery | None = None
        try:
            while True:
                try:
                    message = await self._next(queue, settle if last else empty_settle)
                except TimeoutError:
                    return last
                delivery = await self._take(message)
                if last is None or delivery.offset > last.offset:
                    last = delivery
        finally:
            await self._finish(tag)

    async def read(
        self, start: int | datetime.datetime, end_offset: int, *, idle_timeout: float = IDLE_TIMEOUT
    ) -> AsyncGenerator[Delivery, None]:
        """Records from `start` (an offset, or a time) up to `end_offset` included."""
        queue: asyncio.Queue[DeliveredMessage] = asyncio.Queue()
        tag = await self._consume(start, queue)
        try:
            while True:
                try:
                    message = await self._next(queue, idle_timeout)
                except TimeoutError:
                    raise ArchiveError(
                        f"the stream delivered nothing for {idle_timeout:.0f} s before"
                        f" offset {end_offset}"
                    ) from None
                delivery = await self._take(message)
                if delivery.offset > end_offset:
                    return
                yield delivery
                if delivery.offset == end_offset:
                    return
        finally:
            await self._finish(tag)
