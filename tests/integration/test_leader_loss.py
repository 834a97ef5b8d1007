"""Leader loss: the node leading the request, the reply or the dead-letter queue is
killed (`kill -9`) under load, together and apart, several times in one run; every job
is answered, none is dead-lettered, and replies flow again within 30 s of each kill.

The cluster is `scripts/rabbit-cluster` (RabbitMQ 3.10, or 4.0 under
RABBIT_NODE_VERSION=4.0), nodes and ports of the run's own. Each round publishes a burst
larger than the worker's prefetch window (64), waits until the worker is working
through it, kills the node that leads the round's queue(s), measures how long until
replies flow again, waits for every job of the burst, and starts the killed node again
(it rejoins with its state). The producer and the reply collector rotate to another node when theirs goes.

"Flowing again" is FLOWING replies received after the kill: more than the worker can
hold in its prefetch window, so they cannot all be replies it had published before the
kill. The 30 s bound is a timeout (a hang), not a benchmark; the measured times are
printed for docs/BROKERS.md.

Delivery is at least once: duplicates are counted and printed, not forbidden.

Against the worker as this file was written (issue 33): a worker that reconnects before
the killed reply queue has a new leader has its replies nacked on that channel for
minutes, and each nack moves the job towards dead-lettering. On RabbitMQ 3.10 both
tests failed (1,024 jobs dead-lettered after the first kill of the first; fewer than 100
replies in the 30 s after the first kill of the second); on 4.0 both passed in the one
run made. The broker-link rewrite (refused replies as backpressure) is to make
them pass on both.
"""

import asyncio
import collections
import contextlib
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any

import aio_pika
import orjson
import pytest
from aio_pika.abc import AbstractIncomingMessage

from tests.integration.helpers import (
    StartWorker,
    WorkerProcess,
    new_topology,
    queue_depth,
    wait_for,
)
from tests.integration.test_cluster_failover import Producer
from tests.rabbit_nodes import ExtraCluster, ExtraNode
from worker.transport.link import topology
from worker.transport.link.topology import Topology

pytestmark = [pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(1500)]

BURST = 3000
PREFETCH = 64
# Replies after a kill that prove the path works again (more than the worker can hold).
FLOWING = PREFETCH + 36
FLOWING_WITHIN = 30.0
BURST_ANSWERED_WITHIN = 300.0


# The extra nodes' names (the `cluster` fixture).
CLUSTER_LABEL = "leaders"


@pytest.fixture
def topo() -> Topology:
    """Unique names on the cluster (`cluster`, tests/integration/conftest.py); its nodes'
    state is discarded with it."""
    return new_topology("leaders")


class Collector:
    """Reads the reply queue through one node; when its connection or channel goes, it
    reads on through the next node. Records when each reply arrived."""

    def __init__(self, urls: list[str], reply_queue: str) -> None:
        self.urls = urls
        self.reply_queue = reply_queue
        self.arrivals: list[tuple[float, str]] = []
        self.replies: collections.Counter[str] = collections.Counter()
        self.statuses: collections.Counter[str] = collections.Counter()
        self.reconnects = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _on_reply(self, message: AbstractIncomingMessage) -> None:
        answer: dict[str, Any] = orjson.loads(message.body)
        self.replies[answer["job_id"]] += 1
        self.statuses[answer["status"]] += 1
        self.arrivals.append((time.monotonic(), answer["job_id"]))
        await message.ack()

    async def _run(self) -> None:
        node = 0
        while True:
            with contextlib.suppress(Exception):
                await self._read_through(self.urls[node])
            await asyncio.sleep(0.5)
            self.reconnects += 1
            node = (node + 1) % len(self.urls)

    async def _read_through(self, url: str) -> None:
        """Consume replies through `url` until its connection or channel goes."""
        lost = asyncio.Event()
        connection = await aio_pika.connect(url, timeout=5)
        try:
            connection.close_callbacks.add(lambda *_: lost.set())
            channel = await connection.channel()
            channel.close_callbacks.add(lambda *_: lost.set())
            await channel.set_qos(prefetch_count=256)
            queue = await channel.get_queue(self.reply_queue, ensure=False)
            await queue.consume(self._on_reply)
            await lost.wait()
        finally:
            with contextlib.suppress(Exception):
                await connection.close()

    def after(self, moment: float) -> int:
        return sum(1 for at, _ in self.arrivals if at > moment)


@dataclass
class Round:
    killed: str
    leading: list[str]
    backlog_at_kill: int
    flowing_after: float = 0.0


@dataclass
class Run:
    cluster: ExtraCluster
    topo: Topology
    producer: Producer
    collector: Collector
    worker: WorkerProcess | None = None
    ids: list[str] = field(default_factory=list)
    rounds: list[Round] = field(default_factory=list)

    def live_node(self, but: str = "") -> ExtraNode:
        for node in self.cluster.nodes:
            if node.name != but and node.ctl("status", check=False).returncode == 0:
                return node
        raise AssertionError("no node of the cluster answers")

    def leaders(self) -> dict[str, str]:
        """queue name -> name of the node leading it (asked of a live node)."""
        listing = self.live_node().ctl("list_queues", "name", "leader", "-q").stdout
        out = {}
        for line in listing.splitlines():
            name, _, leader = line.partition("\t")
            if name.strip() in self.topo.queue_names():
                out[name.strip()] = leader.strip().split("@")[0]
        return out

    async def publish_burst(self) -> list[str]:
        batch = [f"leader-{len(self.ids) + i}" for i in range(BURST)]
        self.ids.extend(batch)
        for start in range(0, len(batch), 200):
            await asyncio.gather(*(self.producer.publish(i) for i in batch[start : start + 200]))
        return batch

    async def kill_round(self, queues: list[str]) -> None:
        """One burst, then the node leading `queues` (all of them) killed mid-burst."""
        leaders = await asyncio.to_thread(self.leaders)
        [victim] = {leaders[q] for q in queues}
        # Asked before the burst: rabbitmqctl takes seconds, the worker drains a burst
        # in a few.
        probe_node = await asyncio.to_thread(self.live_node, victim)
        probe_conn = await aio_pika.connect(probe_node.url)
        node = next(n for n in self.cluster.nodes if n.name == victim)
        async with probe_conn:
            probe = await probe_conn.channel()
            # The worker is held (SIGSTOP) while the burst is published, so a backlog
            # larger than its prefetch window is waiting when it goes on.
            assert self.worker is not None
            os.kill(self.worker.pid, signal.SIGSTOP)
            try:
                await self.publish_burst()
            finally:
                os.kill(self.worker.pid, signal.SIGCONT)

            async def working() -> bool:
                # Taken some, a backlog above the prefetch window left.
                depth = await queue_depth(probe, self.topo.request_queue)
                return PREFETCH < depth <= BURST - 2 * PREFETCH

            try:
                await wait_for(working, 60, "the worker to be working through the burst")
            except AssertionError as exc:
                depth = await queue_depth(probe, self.topo.request_queue)
                tail = self.worker.logs()[-2000:]
                raise AssertionError(
                    f"{exc}: {depth} waiting; the worker's log ends:\n{tail}"
                ) from exc
            backlog = await queue_depth(probe, self.topo.request_queue)
            node.kill()
            killed_at = time.monotonic()
        round_ = Round(victim, sorted(q for q, n in leaders.items() if n == victim), backlog)
        self.rounds.append(round_)

        async def flowing() -> bool:
            return self.collector.after(killed_at) >= FLOWING

        await wait_for(flowing, FLOWING_WITHIN, f"replies to flow again after killing {victim}")
        nth = sorted(at for at, _ in self.collector.arrivals if at > killed_at)[FLOWING - 1]
        round_.flowing_after = nth - killed_at

        async def all_answered() -> bool:
            return set(self.ids) <= set(self.collector.replies)

        await wait_for(all_answered, BURST_ANSWERED_WITHIN, "every job of the burst answered")
        await asyncio.to_thread(node.start)  # rejoins the cluster with its state
        # Leaders spread one a node again (the next round kills one queue's leader).
        await asyncio.to_thread(lambda: self.live_node().queues("rebalance", "quorum"))

    def dead_lettered(self) -> int:
        listing = self.live_node().ctl("list_queues", "name", "messages", "-q").stdout
        for line in listing.splitlines():
            name, _, count = line.partition("\t")
            if name.strip() == self.topo.dead_letter_queue:
                return int(count)
        raise AssertionError("the dead-letter queue is gone")

    def report(self, label: str) -> str:
        duplicates = sum(self.collector.replies.values()) - len(set(self.collector.replies))
        rounds = "; ".join(
            f"killed {r.killed} leading {','.join(q.rsplit('.', 1)[-1] for q in r.leading)} "
            f"with {r.backlog_at_kill} waiting: {FLOWING} replies {r.flowing_after:.1f} s after"
            for r in self.rounds
        )
        return (
            f"\nleader loss ({label}): {len(self.ids)} jobs, {duplicates} duplicate replies, "
            f"{self.producer.republished} published again; {rounds}"
        )


async def declare_through(node: ExtraNode, names: Topology, which: str) -> None:
    """Declare one queue of the worker's topology through `node`: its leader goes there."""
    connection = await aio_pika.connect(node.url)
    async with connection:
        channel = await connection.channel()
        if which == "dead":
            await channel.declare_exchange(
                names.dead_letter_exchange, aio_pika.ExchangeType.FANOUT, durable=True
            )
            queue = await channel.declare_queue(
                names.dead_letter_queue,
                durable=True,
                arguments=topology.dead_letter_queue_arguments(),
            )
            await queue.bind(names.dead_letter_exchange)
        elif which == "replies":
            await channel.declare_queue(
                names.reply_queue, durable=True, arguments=topology.reply_queue_arguments()
            )
        else:
            await channel.declare_queue(
                names.request_queue, durable=True, arguments=names.request_arguments()
            )


async def run_rounds(
    cluster: ExtraCluster,
    topo: Topology,
    start_worker: StartWorker,
    kills: list[list[str]],
    label: str,
) -> Run:
    urls = cluster.urls
    run = Run(cluster, topo, Producer(urls[1:] + urls[:1], topo.request_queue), Collector(
        urls[2:] + urls[:2], topo.reply_queue
    ))  # fmt: skip
    run.collector.start()
    try:
        worker = start_worker("--prefetch", str(PREFETCH), amqp_url=cluster.amqp_url)
        run.worker = worker
        await worker.wait_ready()
        for queues in kills:
            await run.kill_round(queues)
    finally:
        await run.collector.stop()
        await run.producer.close()
    print(run.report(label))
    assert set(run.collector.replies) == set(run.ids), "a job was not answered"
    assert run.collector.statuses["error"] == 0
    assert run.dead_lettered() == 0, "a job was dead-lettered"
    dead_lines = [
        e for e in worker.log_events() if e.get("event") == "job" and e.get("settled") == "dead_lettered"
    ]  # fmt: skip
    assert not dead_lines
    assert worker.process.poll() is None, "the worker stopped"
    return run


async def test_the_node_leading_every_queue_dies_twice(
    cluster: ExtraCluster, start_worker: StartWorker, topo: Topology
) -> None:
    first = cluster.nodes[0]
    for which in ("dead", "replies", "requests"):
        await declare_through(first, topo, which)
    every = list(topo.queue_names())
    # The first kill takes every leader; the second, the node that leads the reply
    # queue after the first (with whatever else it leads).
    run = await run_rounds(
        cluster, topo, start_worker, [every, [topo.reply_queue]], "together, then reply"
    )
    assert set(run.rounds[0].leading) == set(every)


async def test_the_nodes_leading_each_queue_die_one_after_another(
    cluster: ExtraCluster, start_worker: StartWorker, topo: Topology
) -> None:
    # One leader a node: requests on the first, replies on the second, dead letters on
    # the third; each round kills the node of one of them.
    await declare_through(cluster.nodes[2], topo, "dead")
    await declare_through(cluster.nodes[1], topo, "replies")
    await declare_through(cluster.nodes[0], topo, "requests")
    kills = [[topo.request_queue], [topo.reply_queue], [topo.dead_letter_queue]]
    await run_rounds(cluster, topo, start_worker, kills, "apart")
