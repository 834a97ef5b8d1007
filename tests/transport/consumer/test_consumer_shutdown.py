"""The consumer's last step of a graceful stop, without a broker: what a delivery that
arrives after the drain found the worker idle gets."""

from typing import Any, cast

from aiormq.abc import AbstractChannel, DeliveredMessage
from pamqp.commands import Basic
from pamqp.header import ContentHeader

from worker.ops.metrics import Metrics
from worker.render.renderer import Renderer
from worker.transport.consumer.acks import BatchedAcks
from worker.transport.consumer.worker import Worker
from worker.transport.settings import Settings


class _Channel:
    """The settling and publishing calls of aiormq's channel, recorded."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def basic_ack(self, tag: int, multiple: bool = False, wait: bool = True) -> None:
        self.calls.append(f"ack {tag} multiple={multiple}")

    async def basic_reject(self, tag: int, *, requeue: bool = True, wait: bool = True) -> None:
        self.calls.append(f"reject {tag} requeue={requeue}")

    async def basic_nack(
        self, tag: int, multiple: bool = False, requeue: bool = True, wait: bool = True
    ) -> None:
        self.calls.append(f"nack {tag} requeue={requeue}")

    async def basic_publish(self, body: bytes, **kwargs: Any) -> None:
        self.calls.append("publish")


def _message(channel: _Channel, tag: int) -> DeliveredMessage:
    body = b'{"job_id": "late", "kind": "react"}'
    properties = Basic.Properties(
        reply_to="amq.gen-client", correlation_id="late", headers={"x-delivery-count": 0}
    )
    return DeliveredMessage(
        delivery=Basic.Deliver(consumer_tag="ctag", delivery_tag=tag),
        header=ContentHeader(properties=properties, body_size=len(body)),
        body=body,
        # The stand-in has just the channel calls the worker makes.
        channel=cast(AbstractChannel, channel),
    )


async def test_a_delivery_reaching_a_closing_worker_is_left_for_the_broker() -> None:
    worker = Worker(Settings(http_port=0), Renderer(), Metrics("test"))
    worker.deliveries.closing = True  # the drain found nothing in flight; the close is next
    channel = _Channel()
    acks = BatchedAcks(channel)
    await worker.deliveries.on_message(acks, _message(channel, 7))
    # Not answered and not settled: the broker redelivers it once the connection
    # closes, so no reply can go out whose request then stays unacknowledged.
    assert channel.calls == []
    assert worker.deliveries.in_flight == 0
    [jobs] = worker.metrics.jobs.collect()
    assert jobs.samples == []  # not counted as a job either
    # ... and no later batched acknowledgement may cover it.
    assert acks.is_unsettled(7)
    acks.register(8)
    await acks.ack(8)
    assert channel.calls == ["ack 8 multiple=False"]
