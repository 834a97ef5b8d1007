"""The consumer's last step of a graceful stop, without a broker: what a delivery that
arrives after the drain found the worker idle gets."""

from typing import Any

from worker.ops.metrics import Metrics
from worker.render.renderer import Renderer
from worker.transport.consumer import Worker
from worker.transport.settings import Settings


class _Delivery:
    """The parts of an incoming message the consumer touches, recording settlements."""

    body = b'{"job_id": "late", "kind": "react"}'
    reply_to = "amq.gen-client"
    correlation_id = "late"
    message_id = None
    redelivered = False

    def __init__(self) -> None:
        self.headers: dict[str, Any] = {"x-delivery-count": 0}
        self.settled: list[str] = []

    async def ack(self) -> None:
        self.settled.append("ack")

    async def reject(self, requeue: bool = False) -> None:
        self.settled.append(f"reject requeue={requeue}")

    async def nack(self, requeue: bool = True) -> None:
        self.settled.append(f"nack requeue={requeue}")


async def test_a_delivery_reaching_a_closing_worker_is_left_for_the_broker() -> None:
    worker = Worker(Settings(http_port=0), Renderer(), Metrics("test"))
    worker._closing = True  # the drain found nothing in flight; the close is next
    delivery = _Delivery()
    await worker._on_message(delivery)  # type: ignore[arg-type]
    # Not answered and not settled: the broker redelivers it once the connection
    # closes, so no reply can go out whose request then stays unacknowledged.
    assert delivery.settled == []
    assert worker._in_flight == 0
    [jobs] = worker.metrics.jobs.collect()
    assert jobs.samples == []  # not counted as a job either
