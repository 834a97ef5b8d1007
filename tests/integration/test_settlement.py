"""Every delivery is settled exactly once, as decided, with acknowledgements batched
(`worker.transport.consumer.acks`): against the real broker, which closes the channel on a
delivery settled twice and hands back, when the worker's connection closes, any
delivery it left unsettled.

The request queue is filled before the worker starts, so the worker drains it at full
prefetch and its acknowledgements come in batches, with bad jobs (dead-lettered one by
one) and big ones (rendered in the helper process, so answered out of order) among the
small good ones.
"""

import asyncio
import signal
from dataclasses import replace

import aio_pika
import orjson
import pytest
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage

from tests.aio_pika_topology import declare_topology
from tests.faulty_serve import FAULTY_SERVE, SLOW_RENDER
from tests.integration.helpers import StartWorker, TcpProxy, a_job, drain, queue_depth, wait_for
from worker.transport.link.topology import Topology

pytestmark = pytest.mark.broker

BAD_EVERY = 7  # every 7th job is not JSON: an error reply, then the dead-letter queue
# Every 25th job is big enough to render in the helper process: it finishes after the
# small jobs delivered behind it, whose acknowledgements cannot join a run past it.
BIG_EVERY = 25
OFFLOAD = ("--offload-bytes", "50000")
BIG_ALERT = "line of alert text\n" * 4000


class Replies:
    """A reply queue of the test's own, and the correlation ids answered on it."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.name = ""

    async def open(self, channel: AbstractChannel) -> None:
        queue = await channel.declare_queue("", exclusive=True)
        self.name = queue.name
        await queue.consume(self._on_reply, no_ack=True)

    async def _on_reply(self, message: AbstractIncomingMessage) -> None:
        assert message.correlation_id is not None
        self.ids.append(message.correlation_id)

    async def wait_for_all(self, expected: set[str], within: float = 180) -> None:
        async def every_one() -> bool:
            return expected <= set(self.ids)

        await wait_for(every_one, within, f"{len(expected)} replies")


async def fill(channel: AbstractChannel, topo: Topology, replies: Replies, count: int) -> set[str]:
    """Publish `count` jobs (every BAD_EVERY-th one not JSON, every BIG_EVERY-th one big);
    the bad jobs' ids."""
    bad: set[str] = set()
    for start in range(0, count, 200):
        publishes = []
        for i in range(start, min(start + 200, count)):
            job_id = f"settle-{i}"
            body = orjson.dumps(
                a_job(job_id, alert_data=BIG_ALERT) if i % BIG_EVERY == 1 else a_job(job_id)
            )
            if i % BAD_EVERY == 0:
                body = f"not json {job_id}".encode()
                bad.add(job_id)
            message = aio_pika.Message(
                body,
                reply_to=replies.name,
                correlation_id=job_id,
                delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            )
            publishes.append(
                channel.default_exchange.publish(message, routing_key=topo.request_queue)
            )
        await asyncio.gather(*publishes)
    return bad


async def filled(channel: AbstractChannel, topo: Topology, count: int) -> tuple[Replies, set[str]]:
    """The topology declared and `count` jobs waiting in it; their replies, the bad ids."""
    await declare_topology(channel, topo)
    replies = Replies()
    await replies.open(channel)
    return replies, await fill(channel, topo, replies, count)


async def nothing_left_unsettled(channel: AbstractChannel, topo: Topology) -> None:
    """Once the worker's connection is closed, any delivery it did not settle is back."""
    await asyncio.sleep(1)  # the broker requeues a closed connection's deliveries
    assert await queue_depth(channel, topo.request_queue) == 0


async def dead_lettered_ids(channel: AbstractChannel, topo: Topology, count: int) -> list[str]:
    dead = await drain(channel, topo.dead_letter_queue, count)
    return sorted(m.body.decode().removeprefix("not json ") for m in dead)


async def test_a_drain_settles_every_delivery_once_as_decided(
    start_worker: StartWorker, topo: Topology, channel: AbstractChannel
) -> None:
    count = 700
    replies, bad = await filled(channel, topo, count)

    worker = start_worker(*OFFLOAD)
    await replies.wait_for_all({f"settle-{i}" for i in range(count)})
    worker.signal(signal.SIGTERM)
    assert await worker.wait_exit() == 0

    await nothing_left_unsettled(channel, topo)
    # Answered once each: nothing was delivered twice, so nothing was settled late.
    assert len(replies.ids) == count
    assert await dead_lettered_ids(channel, topo, len(bad)) == sorted(bad)
    assert await queue_depth(channel, topo.dead_letter_queue) == 0
    events = worker.log_events()
    names = {e["event"] for e in events}
    # A delivery acknowledged twice, or an unknown tag, would have closed the channel.
    assert not names & {"broker_link_down", "broker_reconnected", "settle_failed"}
    jobs = worker.job_lines()
    settled = sorted(e["settled"] for e in jobs)
    assert settled == sorted(["acked"] * (count - len(bad)) + ["dead_lettered"] * len(bad))
    offloaded = sorted(e["job_id"] for e in jobs if e["offloaded"])
    assert offloaded == sorted(
        f"settle-{i}" for i in range(1, count, BIG_EVERY) if f"settle-{i}" not in bad
    )


@pytest.mark.slow
async def test_a_dropped_connection_loses_no_job_and_leaves_none_unsettled(
    start_worker: StartWorker, topo: Topology, channel: AbstractChannel
) -> None:
    count = 3000
    replies, bad = await filled(channel, topo, count)
    proxy = TcpProxy()
    await proxy.start()
    try:
        worker = start_worker(*OFFLOAD, amqp_url=proxy.url + "?reconnect_interval=1")

        async def some_answered() -> bool:
            return len(replies.ids) >= 300

        await wait_for(some_answered, 120, "300 replies")
        # Mid-drain: replies confirmed whose acknowledgements are still on their way
        # are lost with the connection, and those jobs come back.
        await proxy.stop()
        await asyncio.sleep(0.5)
        await proxy.start()
        await replies.wait_for_all({f"settle-{i}" for i in range(count)})
        worker.signal(signal.SIGTERM)
        assert await worker.wait_exit() == 0
    finally:
        await proxy.stop()

    await nothing_left_unsettled(channel, topo)
    assert "broker_reconnected" in {e["event"] for e in worker.log_events()}
    # Dead-lettering is at least once: a bad job whose reject was lost is rejected again.
    dead = await dead_lettered_ids(channel, topo, len(bad))
    dead += await dead_lettered_ids(
        channel, topo, await queue_depth(channel, topo.dead_letter_queue)
    )
    assert set(dead) == bad


async def test_a_request_queue_deleted_under_the_worker_is_declared_and_consumed_again(
    start_worker: StartWorker, topo: Topology, channel: AbstractChannel
) -> None:
    # The worker consumes on its own channel, with no robust layer beneath it, so the
    # broker's cancel of that consumer is the worker's own business.
    worker = start_worker()
    await worker.wait_ready()
    await channel.queue_delete(topo.request_queue)

    # Consuming again on the same channel (`consuming_again`), or, when the broker's
    # consume refuses the queue just declared again (RabbitMQ 4.0 answers the declare
    # while the deletion is still under way, then NOT_FOUND closes the channel), on the
    # channel the link opens anew with the topology declared (`channel_reopened`). In
    # the same race RabbitMQ 4.0 may instead close the connection (541 INTERNAL_ERROR):
    # then on a new connection (`broker_reconnected`).
    again = ("consuming_again", "channel_reopened", "broker_reconnected")

    async def consuming_again() -> bool:
        return any(e.get("event") in again for e in worker.log_events())

    await wait_for(consuming_again, 60, "the worker to consume again")
    events = [e["event"] for e in worker.log_events()]
    first_again = next(event for event in events if event in again)
    assert events.index("consumer_cancelled_by_broker") < events.index(first_again)
    await worker.wait_ready()
    # Declared again with the topology's arguments (a quorum queue with dead-lettering).
    declared = await channel.declare_queue(
        topo.request_queue, durable=True, arguments=topo.request_arguments()
    )
    replies = Replies()
    await replies.open(channel)
    await channel.default_exchange.publish(
        aio_pika.Message(orjson.dumps(a_job("after")), reply_to=replies.name, correlation_id="x"),
        routing_key=declared.name,
    )
    await replies.wait_for_all({"x"}, within=60)


async def test_deliveries_of_a_consumer_replaced_by_a_prefetch_switch_are_settled_once(
    start_worker: StartWorker, topo: Topology, channel: AbstractChannel
) -> None:
    # The first job is big, so the worker at once cancels its consumer and consumes
    # again with a smaller prefetch on the same channel; that job also renders past its
    # deadline, so the old consumer holds it open (then requeues it) while the new
    # consumer's jobs are acknowledged. Both consumers' deliveries share one sequence
    # of delivery tags: a batched ack of the new consumer's jobs must not cover the
    # open one (the broker would close the channel when it is requeued afterwards).
    topo = replace(topo, delivery_limit=2)
    count = 200
    await declare_topology(channel, topo)
    replies = Replies()
    await replies.open(channel)
    slow = orjson.dumps(a_job("slow", alert_data=BIG_ALERT + SLOW_RENDER.decode()))
    await channel.default_exchange.publish(
        aio_pika.Message(slow, reply_to=replies.name, correlation_id="slow"),
        routing_key=topo.request_queue,
    )
    bad = await fill(channel, topo, replies, count)

    worker = start_worker(
        *OFFLOAD,
        "--max-inflight-bytes",
        str(len(BIG_ALERT) * 8),
        "--render-timeout",
        "2",
        "--delivery-limit",
        str(topo.delivery_limit),
        entry=FAULTY_SERVE,
    )
    await replies.wait_for_all({f"settle-{i}" for i in range(count)} | {"slow"})
    worker.signal(signal.SIGTERM)
    assert await worker.wait_exit() == 0

    await nothing_left_unsettled(channel, topo)
    assert len(replies.ids) == count + 1
    dead = await drain(channel, topo.dead_letter_queue, len(bad) + 1)
    assert sorted(m.correlation_id or "" for m in dead) == sorted(bad | {"slow"})
    events = worker.log_events()
    names = [e["event"] for e in events]
    assert "prefetch_switched" in names
    assert not set(names) & {"broker_link_down", "settle_failed", "prefetch_switch_failed"}
    settled = sorted(e["settled"] for e in worker.job_lines())
    assert settled == sorted(
        ["acked"] * (count - len(bad))
        + ["dead_lettered"] * (len(bad) + 1)
        + ["requeued"] * topo.delivery_limit
    )
