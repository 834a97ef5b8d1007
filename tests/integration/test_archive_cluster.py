"""The archive stream in a 3-node cluster (SPEC §12): the node holding the stream's
leader is killed while the worker records, and no record of an acknowledged job is lost.

The cluster is `scripts/rabbit-cluster` (extra nodes beside the system broker). The
worker's queues are declared through a node that survives, and the worker connects to
that node first; the archive stream is declared through the node that will be killed,
so its leader is there (RabbitMQ places a new stream's leader on the declaring client's
node) and its replicas on the other two. The kill leaves the worker's own link up: what
is tested is the archive alone. A job is acknowledged only once its record is confirmed
or its confirm timeout is over (here long enough for a new leader to be elected), so
after the kill every job must still have a record, none counted lost.
"""

import asyncio
import collections
from typing import Any

import aio_pika
import orjson
import pytest
from aio_pika.abc import AbstractIncomingMessage

from tests.aio_pika_topology import declare_topology
from tests.integration.archive_records import read_records
from tests.integration.helpers import (
    StartWorker,
    a_job,
    metric_value,
    new_topology,
    queue_depth,
    wait_for,
)
from tests.rabbit_nodes import ExtraCluster
from worker.archive.recorder import ArchiveSettings
from worker.transport.link.topology import Topology

pytestmark = [pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(900)]

JOBS = 3000
KILL_AFTER = 800
# Longer than a stream's leader election after a node is killed.
CONFIRM_TIMEOUT = "60"
ALL_ANSWERED_WITHIN = 300.0


@pytest.fixture
def topo() -> Topology:
    """Unique names on the cluster (`cluster`, tests/integration/conftest.py); its nodes'
    state is discarded with it."""
    return new_topology("archive-cluster")


async def test_killing_the_stream_leaders_node_loses_no_record_of_an_acknowledged_job(
    cluster: ExtraCluster, start_worker: StartWorker, topo: Topology
) -> None:
    victim_url, survivor_url, third_url = cluster.urls
    victim_port = cluster.nodes[0].port
    stream = f"{topo.request_queue}.archive"
    archive = ArchiveSettings(stream, "7D", 10_000_000_000, float(CONFIRM_TIMEOUT))
    setup = await aio_pika.connect(survivor_url)
    async with setup:
        await declare_topology(await setup.channel(), topo)
    leader = await aio_pika.connect(victim_url)
    async with leader:
        await (await leader.channel()).declare_queue(
            stream, durable=True, arguments=archive.arguments()
        )
    ids = [f"archived-{i}" for i in range(JOBS)]
    replies: collections.Counter[str] = collections.Counter()
    everything = asyncio.Event()

    async def on_reply(message: AbstractIncomingMessage) -> None:
        replies[orjson.loads(message.body)["job_id"]] += 1
        await message.ack()
        if len(replies) == JOBS:
            everything.set()

    collector = await aio_pika.connect_robust(survivor_url)
    try:
        channel = await collector.channel()
        await channel.set_qos(prefetch_count=256)
        await (await channel.get_queue(topo.reply_queue, ensure=False)).consume(on_reply)
        publisher = await collector.channel(publisher_confirms=True)
        for start in range(0, JOBS, 200):
            await asyncio.gather(
                *(
                    publisher.default_exchange.publish(
                        aio_pika.Message(orjson.dumps(a_job(job_id)), delivery_mode=2),
                        routing_key=topo.request_queue,
                    )
                    for job_id in ids[start : start + 200]
                )
            )
        worker = start_worker(
            "--archive-stream",
            stream,
            "--archive-confirm-timeout",
            CONFIRM_TIMEOUT,
            amqp_url=",".join([survivor_url, third_url, victim_url]),
        )
        await worker.wait_ready()

        async def enough() -> bool:
            return len(replies) >= KILL_AFTER

        await wait_for(enough, 180, f"{KILL_AFTER} replies before the kill")
        cluster.node_on(victim_port).kill()
        left_at_kill = await queue_depth(channel, topo.request_queue)
        await asyncio.wait_for(everything.wait(), ALL_ANSWERED_WITHIN)

        def acknowledged() -> set[str]:
            """The jobs the worker acknowledged (its log line says so)."""
            return {
                e["job_id"]
                for e in worker.log_events()
                if e.get("event") == "job" and e.get("settled") == "acked"
            }

        async def settled() -> bool:
            return acknowledged() == set(ids)

        await wait_for(settled, 120, "every job acknowledged")
    finally:
        await collector.close()

    assert left_at_kill > 0, "the backlog was gone at the kill: nothing tested"
    records = await read_records(survivor_url, stream, at_least=JOBS, within=120)
    recorded = collections.Counter(r.record["job_id"] for r in records)
    assert set(recorded) == set(ids), f"{len(set(ids) - set(recorded))} jobs lost their record"
    exposition = (await worker.http_get("/metrics"))[1]
    lost: dict[str, Any] = {
        outcome: metric_value(
            exposition, f'prompt_worker_archive_records_total{{outcome="{outcome}"}}'
        )
        for outcome in ("timeout", "refused", "unroutable", "closed", "failed")
    }
    assert lost == dict.fromkeys(lost, 0.0)
    print(
        f"\narchive in a cluster: {JOBS} jobs, {len(records)} records "
        f"({len(records) - JOBS} duplicates), {sum(replies.values()) - JOBS} duplicate replies"
    )
