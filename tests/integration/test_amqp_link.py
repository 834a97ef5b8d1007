"""The worker's link on the real RabbitMQ: aiormq's connection and channel as
`BrokerLink` opens them, and what the consumer and the publishers rely on of them, as
the broker does it."""

import asyncio
import datetime
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any, cast

import aio_pika
import aiormq
import pytest
from aiormq.abc import AbstractChannel, AbstractConnection, DeliveredMessage
from aiormq.exceptions import (
    ChannelInvalidStateError,
    ChannelNotFoundEntity,
    ChannelPreconditionFailed,
    DeliveryError,
    PublishError,
)
from pamqp.commands import Basic
from yarl import URL

from tests.integration.helpers import AMQP_URL
from worker.ops.logs import get_logger
from worker.transport.link.broker_failures import is_access_refused
from worker.transport.link.connection import BrokerLink
from worker.transport.link.flow import BrokerFlow

pytestmark = pytest.mark.broker


def a_link(url: URL) -> BrokerLink:
    log = get_logger(component="test")
    return BrokerLink([url], log=log, flow=BrokerFlow(log, lambda: None))


@pytest.fixture
def queue() -> Iterator[str]:
    name = f"test-link-{uuid.uuid4().hex[:10]}"
    yield name

    async def delete() -> None:
        connection = await aio_pika.connect(AMQP_URL)
        async with connection:
            channel = await connection.channel()
            await channel.queue_delete(name)

    asyncio.run(delete())


@pytest.fixture
async def connection() -> AsyncIterator[AbstractConnection]:
    link = await a_link(URL(AMQP_URL)).attempt()
    yield link
    await link.close()


def deliver(message: DeliveredMessage) -> Basic.Deliver:
    assert isinstance(message.delivery, Basic.Deliver)
    return message.delivery


def tag(message: DeliveredMessage) -> int:
    number = deliver(message).delivery_tag
    assert number is not None
    return number


class Inbox:
    """What a consumer received, acknowledged as it came."""

    def __init__(self, channel: AbstractChannel, *, ack: bool = True) -> None:
        self.channel = channel
        self.ack = ack
        self.messages: asyncio.Queue[DeliveredMessage] = asyncio.Queue()

    async def __call__(self, message: DeliveredMessage) -> None:
        if self.ack:
            await self.channel.basic_ack(tag(message))
        await self.messages.put(message)

    async def next(self) -> DeliveredMessage:
        return await asyncio.wait_for(self.messages.get(), 10)


async def test_a_published_message_arrives_whole_with_its_properties(
    connection: AbstractConnection, queue: str
) -> None:
    channel = await connection.channel()
    await channel.queue_declare(queue)
    inbox = Inbox(channel)
    await channel.basic_qos(prefetch_count=10)
    await channel.basic_consume(queue, inbox)
    moment = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    headers: dict[str, Any] = {
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "x-death": [{"count": 1, "queue": queue, "time": moment, "routing-keys": [queue]}],
    }
    # Larger than a frame: the body goes in several, and comes back as one.
    body = bytes(range(256)) * 2000
    confirm = await channel.basic_publish(
        body,
        routing_key=queue,
        properties=Basic.Properties(
            content_type="application/json", message_id="m-1", headers=headers, timestamp=moment
        ),
        mandatory=True,
    )
    assert isinstance(confirm, Basic.Ack)
    message = await inbox.next()
    assert message.body == body
    properties = message.header.properties
    assert (properties.content_type, properties.message_id) == ("application/json", "m-1")
    assert properties.headers == headers
    assert properties.timestamp == moment
    assert not deliver(message).redelivered


async def test_an_unroutable_mandatory_publish_is_returned_and_the_next_confirmed(
    connection: AbstractConnection, queue: str
) -> None:
    channel = await connection.channel(on_return_raises=True)
    await channel.queue_declare(queue)
    with pytest.raises(PublishError) as returned:
        await channel.basic_publish(
            b"{}",
            routing_key=f"{queue}.nowhere",
            properties=Basic.Properties(message_id="lost"),
            mandatory=True,
        )
    assert isinstance(returned.value.frame, Basic.Return)
    assert returned.value.frame.reply_text == "NO_ROUTE"
    assert returned.value.message is not None and returned.value.message.body == b"{}"
    # The broker's confirm of the returned publish settles nothing else.
    confirm = await channel.basic_publish(
        b"{}", routing_key=queue, properties=Basic.Properties(message_id="kept"), mandatory=True
    )
    assert isinstance(confirm, Basic.Ack)
    assert not channel.is_closed


async def test_a_returned_publish_without_a_message_id_is_never_taken_as_confirmed(
    connection: AbstractConnection, queue: str
) -> None:
    # The broker's return and its confirm both come; the return must win, whatever
    # the publish carried to match the two.
    channel = await connection.channel(on_return_raises=True)
    await channel.queue_declare(queue)
    returns = await asyncio.gather(
        *(
            channel.basic_publish(b"{}", routing_key=f"{queue}.nowhere", mandatory=True)
            for _ in range(20)
        ),
        return_exceptions=True,
    )
    assert all(isinstance(returned, PublishError) for returned in returns), returns
    assert not channel.is_closed


async def test_a_publish_the_broker_refuses_is_a_delivery_error(
    connection: AbstractConnection, queue: str
) -> None:
    channel = await connection.channel()
    await channel.queue_declare(
        queue, arguments={"x-max-length": 1, "x-overflow": "reject-publish"}
    )
    await channel.basic_publish(b"1", routing_key=queue, properties=Basic.Properties())
    with pytest.raises(DeliveryError) as refused:
        await channel.basic_publish(b"2", routing_key=queue, properties=Basic.Properties())
    assert isinstance(refused.value.frame, Basic.Nack)
    assert not channel.is_closed


async def test_confirms_in_flight_are_settled_each_by_its_own_ack(
    connection: AbstractConnection, queue: str
) -> None:
    channel = await connection.channel()
    await channel.queue_declare(queue)
    confirms = await asyncio.gather(
        *(
            channel.basic_publish(str(n).encode(), routing_key=queue, properties=Basic.Properties())
            for n in range(500)
        )
    )
    assert all(isinstance(confirm, Basic.Ack) for confirm in confirms)
    declared = await channel.queue_declare(queue)
    assert declared.message_count == 500


async def test_a_nacked_delivery_comes_back_redelivered(
    connection: AbstractConnection, queue: str
) -> None:
    channel = await connection.channel()
    await channel.queue_declare(queue)
    inbox = Inbox(channel, ack=False)
    await channel.basic_consume(queue, inbox)
    await channel.basic_publish(b"job", routing_key=queue, properties=Basic.Properties())
    first = await inbox.next()
    await channel.basic_nack(tag(first), requeue=True)
    again = await inbox.next()
    assert deliver(again).redelivered and again.body == b"job"
    await channel.basic_reject(tag(again), requeue=False)


async def test_a_channel_error_closes_the_channel_with_its_reason_and_not_the_connection(
    connection: AbstractConnection, queue: str
) -> None:
    channel = await connection.channel()
    await channel.queue_declare(queue, durable=False)
    closing = channel.closing
    with pytest.raises(ChannelPreconditionFailed, match="inequivalent arg 'durable'"):
        await channel.queue_declare(queue, durable=True)
    with pytest.raises(ChannelPreconditionFailed):
        await closing
    assert channel.is_closed and not connection.is_closed
    with pytest.raises(ChannelInvalidStateError, match="closed"):
        await channel.basic_publish(b"", routing_key=queue, properties=Basic.Properties())
    fresh = await connection.channel()
    assert (await fresh.queue_declare(queue)).queue == queue
    with pytest.raises(ChannelNotFoundEntity):
        await fresh.queue_bind(queue, f"{queue}.no-such-exchange")


async def test_the_broker_cancelling_a_consumer_is_told(
    connection: AbstractConnection, queue: str
) -> None:
    channel = await connection.channel()
    await channel.queue_declare(queue)
    cancelled: asyncio.Queue[Any] = asyncio.Queue()
    channel.on_consumer_cancel_callbacks.add(cancelled.put_nowait)
    consume_ok = await channel.basic_consume(queue, Inbox(channel))
    other = await connection.channel()
    # Deleting the queue under the consumer: RabbitMQ cancels it.
    await other.close()
    aio = await aio_pika.connect(AMQP_URL)
    async with aio:
        await (await aio.channel()).queue_delete(queue)
    frame = await asyncio.wait_for(cancelled.get(), 10)
    assert frame.consumer_tag == consume_ok.consumer_tag
    assert consume_ok.consumer_tag not in cast(aiormq.Channel, channel).consumers
    assert not channel.is_closed


async def test_closing_by_the_worker_ends_the_observers_without_a_broker_error(
    connection: AbstractConnection,
) -> None:
    channel = await connection.channel()
    channel_closing, connection_closing = channel.closing, connection.closing
    await connection.close()
    # aiormq ends the observers of a resource its owner closed with a cancellation (or
    # its future store's bare `Exception`), never with a broker's or a socket's error:
    # the link's loop, no longer wanting to consume, logs none of them as a loss.
    for observer in (channel_closing, connection_closing):
        await asyncio.wait({observer}, timeout=5)
        assert observer.done()
        if not observer.cancelled():
            error = observer.exception()
            assert error is None or type(error) in (asyncio.CancelledError, Exception), error
    assert channel.is_closed and connection.is_closed


async def test_wrong_credentials_are_an_access_refusal() -> None:
    url = URL(AMQP_URL).with_password("not-the-password")
    with pytest.raises(Exception) as refused:
        await a_link(url).attempt()
    assert is_access_refused(refused.value), refused.value


async def test_a_closed_channel_cancels_the_handlers_of_its_deliveries(
    connection: AbstractConnection, queue: str
) -> None:
    channel = await connection.channel()
    await channel.queue_declare(queue)
    started, ended = asyncio.Event(), asyncio.get_running_loop().create_future()

    async def handler(_: DeliveredMessage) -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            ended.set_result("cancelled")
            raise

    await channel.basic_consume(queue, handler)
    await channel.basic_publish(b"job", routing_key=queue, properties=Basic.Properties())
    await asyncio.wait_for(started.wait(), 10)
    with pytest.raises(ChannelPreconditionFailed):
        await channel.queue_declare(queue, durable=True)  # the broker closes the channel
    assert await asyncio.wait_for(ended, 10) == "cancelled"
