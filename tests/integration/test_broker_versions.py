"""What changed between the RabbitMQ versions the worker runs on, pinned through the
real broker (the system's 3.10, or 4.0 when scripts/test points the suite at the node of
scripts/ensure-rabbitmq4).

* Since 4.0 a quorum queue declared without `x-delivery-limit` has one anyway (20): a
  message returned more often than that is dead-lettered (or dropped). On 3.10 such a
  queue redelivers for ever. The worker declares its limit explicitly (5 by default,
  `--delivery-limit`), so its queues behave the same on every version.
* A job that kills its worker each time it is rendered is stopped by that limit: on
  3.10 and 4.0 (up to 4.2) a delivery returned because its consumer's connection went
  away counts toward it. (From 4.3 only an explicit negative acknowledgement counts,
  so there the limit alone no longer stops such a job.)
"""

import asyncio
import os
import signal
from collections.abc import Iterator

import aio_pika
import orjson
import pytest
from aio_pika.abc import AbstractChannel, AbstractQueue

from tests.aio_pika_topology import declare_topology
from tests.faulty_serve import FAULTY_SERVE, SLOW_RENDER
from tests.integration.helpers import (
    AMQP_URL,
    StartWorker,
    a_job,
    drain,
    queue_depth,
    unique_topology,
    wait_for,
)
from worker.transport.link import topology
from worker.transport.link.topology import Topology

pytestmark = pytest.mark.broker

# Enough returns to pass 4.0's default limit, and to show 3.10 has none.
RETURNS = 25
DEFAULT_LIMIT_SINCE_4_0 = 20


async def broker_version(url: str = AMQP_URL) -> tuple[int, int]:
    """The broker's own (major, minor), from the properties it sends on connecting."""
    connection = await aio_pika.connect(url)
    async with connection:
        transport = connection.transport
        assert transport is not None
        version = transport.connection.server_properties["version"]
    assert isinstance(version, str | bytes)
    text = version.decode() if isinstance(version, bytes) else version
    major, minor = text.split(".")[:2]
    return int(major), int(minor)


@pytest.fixture
def bare_topo() -> Iterator[Topology]:
    yield from unique_topology("versions")


async def declare_without_limit(channel: AbstractChannel, names: Topology) -> AbstractQueue:
    """A quorum queue dead-lettering into `names`' dead-letter queue, no delivery limit."""
    dlx = await channel.declare_exchange(
        names.dead_letter_exchange, aio_pika.ExchangeType.FANOUT, durable=True
    )
    dlq = await channel.declare_queue(
        names.dead_letter_queue, durable=True, arguments={"x-queue-type": "quorum"}
    )
    await dlq.bind(dlx)
    return await channel.declare_queue(
        names.request_queue,
        durable=True,
        arguments={"x-queue-type": "quorum", "x-dead-letter-exchange": names.dead_letter},
    )


async def deliveries_until_gone(channel: AbstractChannel, queue: AbstractQueue) -> int:
    """Get the queue's one message and return it (nack, requeue) until it is no longer
    in the queue or RETURNS have been made; the number of deliveries seen."""
    seen = 0
    while seen <= RETURNS:
        message = await queue.get(fail=False, timeout=5)
        if message is None:
            # A return is settled asynchronously: the message may be on its way back.
            await asyncio.sleep(0.2)
            if await queue_depth(channel, queue.name) == 0:
                message = await queue.get(fail=False, timeout=5)
                if message is None:
                    return seen
            continue
        seen += 1
        if seen <= RETURNS:
            await message.nack(requeue=True)
        else:
            await message.ack()
    return seen


async def test_a_quorum_queue_without_a_delivery_limit_has_the_versions_default(
    bare_topo: Topology, channel: AbstractChannel
) -> None:
    version = await broker_version()
    queue = await declare_without_limit(channel, bare_topo)
    body = orjson.dumps(a_job("returned"))
    await channel.default_exchange.publish(aio_pika.Message(body), routing_key=queue.name)

    deliveries = await deliveries_until_gone(channel, queue)

    if version >= (4, 0):
        # The first delivery and 20 returns; the 21st return dead-letters it.
        assert deliveries == DEFAULT_LIMIT_SINCE_4_0 + 1
        [dead] = await drain(channel, bare_topo.dead_letter_queue, 1)
        assert dead.body == body
    else:
        assert deliveries == RETURNS + 1  # never dead-lettered: taken by the last ack
        assert await queue_depth(channel, bare_topo.dead_letter_queue) == 0


async def test_the_workers_topology_keeps_its_own_limit_on_every_version(
    bare_topo: Topology, channel: AbstractChannel
) -> None:
    # The worker's declaration, through its own code.
    await declare_topology(channel, bare_topo)
    queue = await channel.get_queue(bare_topo.request_queue, ensure=False)
    body = orjson.dumps(a_job("returned"))
    await channel.default_exchange.publish(aio_pika.Message(body), routing_key=queue.name)

    deliveries = await deliveries_until_gone(channel, queue)

    assert deliveries == topology.DEFAULT_DELIVERY_LIMIT + 1
    [dead] = await drain(channel, bare_topo.dead_letter_queue, 1)
    assert dead.body == body


KILLER_LIMIT = 2


@pytest.mark.slow
async def test_a_job_that_kills_its_worker_every_time_is_stopped_by_the_delivery_limit(
    start_worker: StartWorker, topo: Topology, channel: AbstractChannel
) -> None:
    """A job during whose render the worker dies (SIGKILL, as an out-of-memory kill
    would) is handed to the next worker; after KILLER_LIMIT + 1 deliveries the broker
    dead-letters it instead of killing workers for ever."""
    version = await broker_version()
    assert version < (4, 3), "from 4.3 a connection's loss no longer counts: see above"
    body = orjson.dumps(a_job("killer", alert_data=SLOW_RENDER.decode()))
    args = ("--delivery-limit", str(KILLER_LIMIT), "--render-timeout", "3600")
    # Declared (by a worker stopped at once) before the job is published.
    first = start_worker(*args, entry=FAULTY_SERVE)
    await first.wait_ready()
    first.kill()
    await channel.default_exchange.publish(aio_pika.Message(body), routing_key=topo.request_queue)

    kills = 0
    for _ in range(KILLER_LIMIT + 3):
        if await queue_depth(channel, topo.dead_letter_queue) == 1:
            break
        worker = start_worker(*args, entry=FAULTY_SERVE)
        await worker.wait_ready()

        async def taken() -> bool:
            return await queue_depth(channel, topo.request_queue) == 0

        await wait_for(taken, 60, "the worker to take the job")
        await asyncio.sleep(0.5)  # its render under way
        os.kill(worker.pid, signal.SIGKILL)
        worker.process.wait(timeout=30)
        kills += 1

        async def settled() -> bool:
            depths = [
                await queue_depth(channel, name)
                for name in (topo.request_queue, topo.dead_letter_queue)
            ]
            return sum(depths) == 1

        # The broker notices the dead connection and returns (or dead-letters) the job.
        await wait_for(settled, 60, "the broker to take the job back")

    assert kills == KILLER_LIMIT + 1
    [dead] = await drain(channel, topo.dead_letter_queue, 1)
    assert dead.body == body
    assert await queue_depth(channel, topo.request_queue) == 0
