"""Resource alarms: a broker that blocks publishers makes the worker unready, and the
jobs delivered meanwhile wait in the worker, unanswered, until the broker unblocks it.

The alarm is a memory alarm on a node of the test's own (tests/rabbit_nodes.py), raised
by lowering the memory watermark below what the node uses and cleared by raising it
again. During an alarm RabbitMQ reads nothing more from a connection once it publishes,
and tells it with `connection.blocked` only then: the worker learns of the alarm with
its first reply, through aiormq's public `Connection.ready()`, which waits while the
connection is blocked. And no producer's job reaches a queue during the alarm (its publish is
not read either), so the jobs the worker is handed while blocked are brought in the one
way a broker moves messages of its own accord: dead-lettered from a side queue by a
connection that only consumes, which the alarm does not block.
"""

import asyncio
import json
import signal
from collections.abc import Iterator

import aio_pika
import orjson
import pytest
from aio_pika.abc import AbstractChannel, AbstractQueue

from tests.integration.helpers import (
    StartWorker,
    WorkerProcess,
    a_job,
    archive_stream,
    drain,
    metric_value,
    queue_depth,
    wait_for,
)
from tests.rabbit_nodes import ExtraNode
from worker.transport.link.flow import BLOCKED_REASON
from worker.transport.link.topology import Topology

pytestmark = [pytest.mark.broker, pytest.mark.slow]

# Far below what any node uses: the memory alarm goes off at once.
TINY_WATERMARK = "0.0000001"
NORMAL_WATERMARK = "0.4"  # RabbitMQ's default
HELD = 20


def alarms(node: ExtraNode) -> str:
    return node.ctl("eval", "rabbit_alarm:get_alarms().").stdout


async def readyz(worker: WorkerProcess) -> tuple[int, dict[str, bool]]:
    status, body = await worker.http_get("/readyz")
    return status, json.loads(body)


async def metrics(worker: WorkerProcess) -> str:
    return (await worker.http_get("/metrics"))[1]


async def dead_letter_into_requests(side: AbstractQueue, count: int) -> None:
    """Move `count` jobs from the side queue to the request queue, broker-side."""
    for _ in range(count):
        message = await side.get(timeout=10)
        await message.reject(requeue=False)


async def park(channel: AbstractChannel, topo: Topology, ids: list[str]) -> AbstractQueue:
    """Jobs parked before the alarm in a side queue that dead-letters into the worker's."""
    side = await channel.declare_queue(
        f"{topo.request_queue}.side",
        arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": topo.request_queue},
    )
    for job_id in ids:
        await channel.default_exchange.publish(
            aio_pika.Message(orjson.dumps(a_job(job_id))), routing_key=side.name
        )
    return side


async def block(node: ExtraNode, worker: WorkerProcess, side: AbstractQueue) -> None:
    """Raise the memory alarm and hand the worker one job: its reply gets it blocked."""
    await asyncio.to_thread(node.ctl, "set_vm_memory_high_watermark", TINY_WATERMARK)
    assert "memory" in alarms(node)
    await dead_letter_into_requests(side, 1)

    async def unready() -> bool:
        return (await readyz(worker))[0] == 503

    await wait_for(unready, 60, "the worker to report the block")


async def clear_alarm(node: ExtraNode) -> None:
    await asyncio.to_thread(node.ctl, "set_vm_memory_high_watermark", NORMAL_WATERMARK)


@pytest.fixture(scope="module")
def alarm_node() -> Iterator[ExtraNode]:
    """The node both tests raise their alarm on (one start serves them: each has queues,
    a worker and connections of its own, and clears its alarm when done)."""
    with ExtraNode("alarms", fresh=True) as started:
        yield started


@pytest.fixture
def node(alarm_node: ExtraNode) -> ExtraNode:
    assert "memory" not in alarms(alarm_node), "an earlier test left the alarm raised"
    return alarm_node


async def test_a_memory_alarm_holds_new_deliveries_and_makes_the_worker_unready(
    start_worker: StartWorker, topo: Topology, node: ExtraNode
) -> None:
    worker = start_worker(amqp_url=node.url + "?reconnect_interval=0.2")
    await worker.wait_ready()
    connection = await aio_pika.connect(node.url)
    try:
        channel: AbstractChannel = await connection.channel()
        ids = [f"alarm-{i}" for i in range(HELD + 1)]
        side = await park(channel, topo, ids)
        try:
            # The first job's reply is the worker's first publish during the alarm:
            # the broker blocks the connection, and says so.
            await block(node, worker, side)
            status, body = await readyz(worker)
            assert status == 503
            assert body == {
                "ready": False,
                "connected": True,
                "consuming": True,
                "accepting": True,
                "unblocked": False,
                "replies_accepted": True,
                # No record was due: the blocked reply comes first.
                "archive": {
                    "stream": archive_stream(topo),
                    "connected": True,
                    "recording": True,
                    "last_problem": None,
                    "lost": {},
                },
            }
            # aiormq tells that the connection is blocked (`ready()` waits), not why.
            [blocked] = worker.events("broker_blocked")
            assert blocked["reason"] == BLOCKED_REASON
            assert blocked["level"] == "warning"

            # Delivered while blocked: every one waits, none is handled.
            await dead_letter_into_requests(side, HELD)

            async def all_delivered() -> bool:
                return await queue_depth(channel, topo.request_queue) == 0

            await wait_for(all_delivered, 60, "the held jobs to be delivered")
            exposition = await metrics(worker)
            assert metric_value(exposition, "prompt_worker_broker_blocked") == 1
            assert metric_value(exposition, "prompt_worker_ready") == 0
            # Only the first job is being handled (its reply waits for its confirm).
            assert metric_value(exposition, "prompt_worker_in_flight") == 1
            assert not worker.job_lines()
        finally:
            await clear_alarm(node)

        # Unblocked: every job answered once, none dead-lettered or left behind.
        await worker.wait_ready()
        replies = await drain(channel, topo.reply_queue, len(ids))
        assert sorted(orjson.loads(r.body)["job_id"] for r in replies) == sorted(ids)
        [unblocked] = worker.events("broker_unblocked")
        assert unblocked["held"] == HELD
        assert unblocked["level"] == "info"
        assert metric_value(await metrics(worker), "prompt_worker_broker_blocked") == 0
        assert sorted(str(e["job_id"]) for e in worker.job_lines()) == sorted(ids)
        assert {e["settled"] for e in worker.job_lines()} == {"acked"}
        assert await queue_depth(channel, topo.request_queue) == 0
        assert await queue_depth(channel, topo.dead_letter_queue) == 0
        # The worker's own line about the block, not a library's.
        assert "was blocked by" not in worker.logs()
        worker.signal(signal.SIGTERM)
        assert await worker.wait_exit() == 0
    finally:
        await connection.close()


async def test_a_worker_stopped_during_an_alarm_exits_and_loses_nothing(
    start_worker: StartWorker, topo: Topology, node: ExtraNode
) -> None:
    # A rolling deploy while the broker is blocked: the drain cannot settle anything
    # (the broker reads nothing from the connection), so it ends at its timeout and the
    # jobs the worker held go to the next worker.
    url = node.url + "?reconnect_interval=0.2"
    worker = start_worker("--shutdown-timeout", "2", amqp_url=url)
    await worker.wait_ready()
    connection = await aio_pika.connect(node.url)
    try:
        channel: AbstractChannel = await connection.channel()
        ids = [f"stopped-{i}" for i in range(HELD + 1)]
        side = await park(channel, topo, ids)
        try:
            await block(node, worker, side)
            await dead_letter_into_requests(side, HELD)

            async def all_delivered() -> bool:
                return await queue_depth(channel, topo.request_queue) == 0

            await wait_for(all_delivered, 60, "the held jobs to be delivered")
            worker.signal(signal.SIGTERM)
            assert await worker.wait_exit(within=60) == 0
            assert not worker.job_lines()
        finally:
            await clear_alarm(node)

        successor = start_worker(amqp_url=url)
        await successor.wait_ready()
        # At least once: the stopped worker's one reply may have got through too.
        answered: set[str] = set()
        while answered != set(ids):
            [reply] = await drain(channel, topo.reply_queue, 1)
            answered.add(orjson.loads(reply.body)["job_id"])
        assert await queue_depth(channel, topo.dead_letter_queue) == 0
        successor.signal(signal.SIGTERM)
        assert await successor.wait_exit() == 0
    finally:
        await connection.close()
