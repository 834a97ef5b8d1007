"""Cluster failover: the worker, given every node of a 3-node cluster, loses its node in
the middle of a run and carries on from another one; no job is lost.

The cluster is `scripts/rabbit-cluster` (extra nodes beside the system broker, on free
ports of the run), started for the test and stopped after it. The queues are quorum queues
(the worker's topology), declared through a node that survives: their leaders stay up,
as in production, where a quorum queue's leader moves to a surviving member. (Were the
killed node the leader of the reply queue, RabbitMQ 3.10 refuses the reconnected
worker's replies for minutes while the queue recovers: docs/BROKERS.md.)

The producer publishes with publisher confirms and, should its own node fail, publishes
what was not confirmed again through another node. Delivery is at least once: a job
whose reply went out just before the kill, but whose ack did not, is answered twice.
Duplicates are counted and reported, not forbidden.
"""

import asyncio
import collections
import contextlib
import signal
from typing import Any

import aio_pika
import orjson
import pytest
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractRobustConnection

from tests.aio_pika_topology import declare_topology
from tests.integration.helpers import (
    StartWorker,
    WorkerProcess,
    a_job,
    new_topology,
    queue_depth,
    wait_for,
)
from tests.rabbit_nodes import ExtraCluster, ExtraNode
from worker.transport.link.broker_failures import broker_address
from worker.transport.link.topology import Topology

pytestmark = [pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(900)]

JOBS = 5000
# Published before the worker starts: a backlog keeps its prefetch window full.
BACKLOG = 4000
# The kill comes once the worker has taken this many jobs, while a backlog remains:
# mid-run, with jobs in flight.
KILL_AFTER = 1000
ALL_ANSWERED_WITHIN = 300.0


@pytest.fixture
def topo() -> Topology:
    """Unique names on the cluster (`cluster`, tests/integration/conftest.py); its nodes'
    state is discarded with it."""
    return new_topology("failover")


def worker_ports(cluster: ExtraCluster, worker: WorkerProcess, ask: int) -> set[int]:
    """The AMQP ports of the nodes the worker's connections are on, as the cluster sees
    them (asked of the node listening on `ask`)."""
    listing = cluster.node_on(ask).ctl("list_connections", "port", "client_properties", "-q")
    ports = set()
    for line in listing.stdout.splitlines():
        port, _, properties = line.partition("\t")
        if f'pid {worker.pid}"' in properties and port.strip().isdigit():
            ports.add(int(port))
    return ports


def unacknowledged(node: ExtraNode, topo: Topology) -> int:
    """The request queue's deliveries not yet acknowledged, as `node` reports them."""
    listing = node.ctl("list_queues", "name", "messages_unacknowledged", "-q").stdout
    for line in listing.splitlines():
        name, _, count = line.partition("\t")
        if name == topo.request_queue and count.strip().isdigit():
            return int(count)
    return 0


class Producer:
    """Publishes jobs with confirms through one node; if that fails, reconnects through
    the next node of the list and publishes again what was not confirmed."""

    def __init__(self, urls: list[str], request_queue: str) -> None:
        self.urls = urls
        self.request_queue = request_queue
        self.node = 0
        self.republished = 0
        self.confirmed = 0
        self._connection: aio_pika.abc.AbstractConnection | None = None
        self._channel: AbstractChannel | None = None
        # Publishes run side by side: one of them (re)connects, the others wait for it.
        self._opening = asyncio.Lock()

    async def _open(self) -> AbstractChannel:
        async with self._opening:
            if self._channel is None or self._channel.is_closed:
                if self._connection is not None:
                    with contextlib.suppress(Exception):
                        await self._connection.close()
                self._connection = await aio_pika.connect(self.urls[self.node], timeout=10)
                self._channel = await self._connection.channel(publisher_confirms=True)
            return self._channel

    async def publish(self, job_id: str) -> None:
        body = orjson.dumps(a_job(job_id))
        channel: AbstractChannel | None = None
        for attempt in range(10):
            try:
                channel = await self._open()
                await channel.default_exchange.publish(
                    aio_pika.Message(
                        body,
                        correlation_id=job_id,
                        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                    ),
                    routing_key=self.request_queue,
                    timeout=30,
                )
                self.confirmed += 1
                return
            except Exception:
                # Not confirmed: it may or may not be queued. Publishing again can only
                # add a duplicate, which the count below allows.
                self.republished += 1
                if self._channel is channel:  # the first to see it moves to the next node
                    self._channel = None
                    self.node = (self.node + 1) % len(self.urls)
                await asyncio.sleep(min(0.2 * 2**attempt, 5))
        raise AssertionError(f"job {job_id} could not be published through any node")

    async def close(self) -> None:
        if self._connection is not None:
            await self._connection.close()


async def test_the_worker_fails_over_to_another_node_and_no_job_is_lost(
    cluster: ExtraCluster, start_worker: StartWorker, topo: Topology
) -> None:
    victim_url, survivor_url, third_url = cluster.urls
    victim_port = cluster.nodes[0].port
    # Declared through a surviving node: the quorum queues' leaders are placed there.
    setup = await aio_pika.connect(survivor_url)
    async with setup:
        await declare_topology(await setup.channel(), topo)

    replies: collections.Counter[str] = collections.Counter()
    statuses: collections.Counter[str] = collections.Counter()
    everything = asyncio.Event()
    ids = [f"failover-{i}" for i in range(JOBS)]

    async def on_reply(message: AbstractIncomingMessage) -> None:
        answer: dict[str, Any] = orjson.loads(message.body)
        replies[answer["job_id"]] += 1
        statuses[answer["status"]] += 1
        await message.ack()
        if len(replies) == JOBS:
            everything.set()

    # The collector reads the reply queue through the surviving node, robustly.
    collector: AbstractRobustConnection = await aio_pika.connect_robust(survivor_url)
    producer = Producer([survivor_url, third_url], topo.request_queue)
    try:
        channel = await collector.channel()
        await channel.set_qos(prefetch_count=256)
        reply_queue = await channel.get_queue(topo.reply_queue, ensure=False)
        await reply_queue.consume(on_reply)

        async def publish_range(first: int, end: int) -> None:
            # A few hundred at a time, each confirmed.
            for start in range(first, end, 200):
                batch = ids[start : min(start + 200, end)]
                await asyncio.gather(*(producer.publish(i) for i in batch))

        # A backlog first, so the worker's prefetch window is full when its node goes;
        # the rest is published while it runs, across the kill.
        await publish_range(0, BACKLOG)
        # Every node, the victim first: the worker starts on it.
        worker = start_worker(amqp_url=cluster.amqp_url)
        await worker.wait_ready()
        # From the worker's own line: asking the cluster (rabbitmqctl) takes seconds,
        # long enough on a quiet machine for the worker to drain the whole backlog.
        [consuming] = [e for e in worker.log_events() if e.get("event") == "consuming"]
        assert consuming["broker"] == broker_address(victim_url)
        window: int = consuming["prefetch"]
        publishing = asyncio.create_task(publish_range(BACKLOG, JOBS))

        # Taken by the worker: confirmed into the request queue and no longer in it.
        # (Counting replies instead would lag behind: the worker can drain the backlog
        # before the collector has read a quarter of its replies.)
        probe = await collector.channel()

        async def taken() -> int:
            return producer.confirmed - await queue_depth(probe, topo.request_queue)

        async def enough() -> bool:
            return await taken() >= KILL_AFTER

        await wait_for(enough, 180, f"the worker to take {KILL_AFTER} jobs")
        # Frozen across the kill, with its prefetch window full: the worker is faster than
        # the cluster hands out jobs, so left running it may be between windows when the
        # node goes, every delivery acknowledged (the acks lost with the node, the jobs
        # handed out again) and none unsettled to report.
        worker.signal(signal.SIGSTOP)
        try:
            survivor = cluster.node_on(cluster.nodes[1].port)

            async def window_full() -> bool:
                return await asyncio.to_thread(unacknowledged, survivor, topo) >= window

            await wait_for(window_full, 60, "the worker's prefetch window to fill")
            cluster.node_on(victim_port).kill()
            left_at_kill = await queue_depth(probe, topo.request_queue)
        finally:
            worker.signal(signal.SIGCONT)

        await asyncio.wait_for(everything.wait(), ALL_ANSWERED_WITHIN)
        await publishing
    finally:
        await producer.close()
        await collector.close()

    assert left_at_kill > 0, "the backlog was gone at the kill: nothing tested"
    assert set(replies) == set(ids), "a job was lost"
    assert statuses["error"] == 0
    duplicates = sum(replies.values()) - JOBS
    # The jobs the worker held at the kill came back to it on the new node. (Its
    # prefetch window was full: a backlog remained.)
    events = worker.log_events()
    redelivered = [e for e in events if e.get("event") == "job" and e["attempt"] >= 1]
    assert redelivered, "no job was in flight at the kill: nothing tested"
    # Counted, not forbidden (at least once); but each duplicate is a job handled again.
    assert duplicates <= len(redelivered) + producer.republished
    print(
        f"\ncluster failover: {JOBS} jobs, {duplicates} duplicate replies, "
        f"{len(redelivered)} redelivered, {producer.republished} published again by the "
        "producer"
    )

    # The worker resumed on another node, and says which.
    [down] = [event for event in events if event.get("event") == "broker_link_down"]
    # The jobs the worker held unsettled when its node went, as it reports them.
    assert 0 < down["unsettled"] <= window
    reconnected = [event for event in events if event.get("event") == "broker_reconnected"]
    assert reconnected, "the worker did not reconnect"
    killed = broker_address(victim_url)
    assert reconnected[-1]["broker"] != killed
    assert worker.process.poll() is None, "the worker stopped"
    now_on = worker_ports(cluster, worker, ask=cluster.nodes[1].port)
    assert now_on and victim_port not in now_on
    assert {f"127.0.0.1:{port}" for port in now_on} == {reconnected[-1]["broker"]}

    # Nothing was dead-lettered on the way.
    check = await aio_pika.connect(survivor_url)
    async with check:
        dead = await (await check.channel()).declare_queue(topo.dead_letter_queue, passive=True)
        assert dead.declaration_result.message_count == 0
