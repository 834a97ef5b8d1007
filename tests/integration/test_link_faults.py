"""Broker faults not covered elsewhere, through a real worker and RabbitMQ (issue 33):
a disk alarm, on a node of its own (tests/rabbit_nodes.py), never on the shared broker.
(A half-open connection and a declare refused at start-up: test_link_detection.py.)

Bounds are timeouts (a hang fails the test); the measured times are printed for
docs/BROKERS.md.
"""

import asyncio
import json
import time

import aio_pika
import orjson
import pytest
from aio_pika.abc import AbstractChannel, AbstractQueue

from tests.integration.helpers import (
    StartWorker,
    WorkerProcess,
    a_job,
    drain,
    queue_depth,
    wait_for,
)
from tests.rabbit_nodes import ExtraNode
from worker.transport.link.flow import BLOCKED_REASON
from worker.transport.link.topology import Topology

pytestmark = pytest.mark.broker


async def publish(channel: AbstractChannel, queue: str, ids: list[str]) -> None:
    for job_id in ids:
        await channel.default_exchange.publish(
            aio_pika.Message(orjson.dumps(a_job(job_id)), correlation_id=job_id),
            routing_key=queue,
        )


def answered_ids(replies: list[aio_pika.abc.AbstractIncomingMessage]) -> set[str]:
    return {orjson.loads(r.body)["job_id"] for r in replies}


# --- (c) disk alarm --------------------------------------------------------------------


def alarms(node: ExtraNode) -> str:
    return node.ctl("eval", "rabbit_alarm:get_alarms().").stdout


async def readyz(worker: WorkerProcess) -> tuple[int, dict[str, bool]]:
    status, body = await worker.http_get("/readyz")
    return status, json.loads(body)


@pytest.mark.slow
async def test_a_disk_alarm_makes_the_worker_unready_holds_deliveries_and_loses_nothing(
    start_worker: StartWorker, topo: Topology
) -> None:
    with ExtraNode("diskalarm", fresh=True) as node:
        worker = start_worker(amqp_url=node.url + "?reconnect_interval=0.2")
        await worker.wait_ready()
        connection = await aio_pika.connect(node.url)
        try:
            channel: AbstractChannel = await connection.channel()
            ids = [f"disk-{i}" for i in range(40)]
            # Parked before the alarm: no publish is read during it.
            side = await park(channel, topo, ids)
            try:
                # Far above any free space: the disk alarm goes off.
                await asyncio.to_thread(node.ctl, "set_disk_free_limit", "1000000GB")

                async def alarmed() -> bool:
                    return "disk" in await asyncio.to_thread(alarms, node)

                await wait_for(alarmed, 30, "the disk alarm")
                alarm_at = time.monotonic()
                # The jobs reach the queue the one way an alarm lets them: dead-lettered
                # broker-side from the side queue (a connection that only consumes is
                # not blocked). The worker's first reply gets its connection blocked.
                for _ in ids:
                    message = await side.get(timeout=10)
                    await message.reject(requeue=False)

                async def unready() -> bool:
                    return (await readyz(worker))[0] == 503

                await wait_for(unready, 60, "the worker to report the disk alarm")
                unready_after = time.monotonic() - alarm_at
                status, body = await readyz(worker)
                assert status == 503
                assert body["unblocked"] is False
                # aiormq tells that the connection is blocked, not which alarm.
                [blocked] = worker.events("broker_blocked")
                assert blocked["reason"] == BLOCKED_REASON
                # Held: nothing answered while the alarm lasts.
                assert await queue_depth(channel, topo.reply_queue) == 0
            finally:
                await asyncio.to_thread(node.ctl, "set_disk_free_limit", "50MB")
            cleared_at = time.monotonic()
            await worker.wait_ready()
            ready_after = time.monotonic() - cleared_at
            replies = await drain(channel, topo.reply_queue, len(ids))
            assert answered_ids(replies) == set(ids)
            assert all(orjson.loads(r.body)["status"] == "ok" for r in replies)
            assert await queue_depth(channel, topo.dead_letter_queue) == 0
            print(
                f"\ndisk alarm: unready {unready_after:.1f} s after the alarm, ready again "
                f"{ready_after:.1f} s after it cleared, {len(ids)} held jobs all answered"
            )
        finally:
            await connection.close()


async def park(channel: AbstractChannel, topo: Topology, ids: list[str]) -> AbstractQueue:
    """`ids` in a side queue that dead-letters into the worker's request queue."""
    side = await channel.declare_queue(
        f"{topo.request_queue}.side",
        arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": topo.request_queue},
    )
    for job_id in ids:
        await channel.default_exchange.publish(
            aio_pika.Message(orjson.dumps(a_job(job_id))), routing_key=side.name
        )
    return side
