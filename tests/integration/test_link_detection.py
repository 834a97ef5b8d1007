"""A half-open broker connection and a declare refused at start-up, through a real
worker and RabbitMQ (issue 33).

The half-open connection is the tests' TCP proxy holding every byte in both directions
with the connections left open (no RST, no FIN): only heartbeats can tell. The bound
"within twice the heartbeat" is a timeout (a hang fails the test); the measured times
are printed for docs/BROKERS.md. The worker cuts a link that stays silent for 1.5
heartbeat intervals (the broker sends one every half interval), checked every half
interval.
"""

import asyncio
import contextlib
import json
import re
import time
import uuid
from collections.abc import Iterator

import aio_pika
import orjson
import pytest
from aio_pika.abc import AbstractChannel

from tests.integration.helpers import (
    AMQP_URL,
    StartWorker,
    TcpProxy,
    a_job,
    drain,
    queue_depth,
    rabbitmqctl,
    wait_for,
)
from worker.transport.link.broker_failures import broker_address
from worker.transport.link.topology import Topology

pytestmark = pytest.mark.broker

HEARTBEAT = 4  # seconds, asked for in the worker's URL
JOBS = 300


async def publish(channel: AbstractChannel, queue: str, ids: list[str]) -> None:
    for job_id in ids:
        await channel.default_exchange.publish(
            aio_pika.Message(orjson.dumps(a_job(job_id)), correlation_id=job_id),
            routing_key=queue,
        )


def answered_ids(replies: list[aio_pika.abc.AbstractIncomingMessage]) -> set[str]:
    return {orjson.loads(r.body)["job_id"] for r in replies}


# --- (b) half-open connection ----------------------------------------------------------


@pytest.mark.slow
async def test_a_half_open_connection_is_noticed_within_twice_the_heartbeat(
    start_worker: StartWorker, topo: Topology, channel: AbstractChannel
) -> None:
    proxy = TcpProxy()
    await proxy.start()
    try:
        url = f"{proxy.url}?heartbeat={HEARTBEAT}&reconnect_interval=0.2"
        worker = start_worker(amqp_url=url)
        await worker.wait_ready()
        ids = [f"half-open-{i}" for i in range(JOBS)]
        await publish(channel, topo.request_queue, ids)

        async def working() -> bool:
            return await queue_depth(channel, topo.request_queue) < JOBS - 20

        await wait_for(working, 60, "the worker to be working through the jobs")
        proxy.pause()
        paused_at = time.monotonic()

        async def noticed() -> bool:
            return bool(worker.events("broker_link_down"))

        # Heartbeats sent every HEARTBEAT / 2 s by both sides: two heartbeat intervals
        # without a byte are the most a live link can be silent for.
        await wait_for(noticed, 2 * HEARTBEAT, "the worker to notice the silent link")
        noticed_after = time.monotonic() - paused_at
        # The proxy lets bytes through again: the new connection (and the old one's
        # last words) pass; the broker has requeued what the old connection held.
        proxy.resume()
        await worker.wait_ready()
        reconnected_after = time.monotonic() - paused_at
        replies = await drain(channel, topo.reply_queue, JOBS, within=120)
        # At least once: a job answered twice is counted, none may be missing.
        extra = []
        while (more := await drain_some(channel, topo.reply_queue)) is not None:
            extra.append(more)
        assert answered_ids(replies + extra) == set(ids)
        assert await queue_depth(channel, topo.dead_letter_queue) == 0
        print(
            f"\nhalf-open link, heartbeat {HEARTBEAT} s: noticed after {noticed_after:.1f} s,"
            f" ready again after {reconnected_after:.1f} s, {len(replies) + len(extra) - JOBS}"
            " duplicate replies"
        )
    finally:
        await proxy.stop()


async def drain_some(
    channel: AbstractChannel, queue_name: str
) -> aio_pika.abc.AbstractIncomingMessage | None:
    """One more message from `queue_name` if one comes within a second, acked."""
    queue = await channel.get_queue(queue_name, ensure=False)
    message = await queue.get(fail=False, timeout=5)
    if message is None:
        await asyncio.sleep(1)
        message = await queue.get(fail=False, timeout=5)
    if message is not None:
        await message.ack()
    return message


# --- (d) permission refused on a declare at start-up ----------------------------------


@contextlib.contextmanager
def user_who_may_configure(pattern: str) -> Iterator[str]:
    """The URL of a user of the test's own with configure permission on `pattern` only
    (write and read on everything); removed again at the end."""
    user, password = f"test-declare-{uuid.uuid4().hex[:10]}", uuid.uuid4().hex
    rabbitmqctl("add_user", user, password)
    try:
        rabbitmqctl("set_permissions", "-p", "/", user, pattern, ".*", ".*")
        yield f"amqp://{user}:{password}@{broker_address(AMQP_URL)}/?reconnect_interval=0.2"
    finally:
        rabbitmqctl("delete_user", user)


async def test_a_declare_refused_at_start_up_is_one_line_naming_queue_and_permission(
    start_worker: StartWorker, topo: Topology
) -> None:
    # Everything of the topology but the request queue may be declared.
    allowed = "^(" + "|".join(re.escape(n) for n in (topo.dead_letter, topo.reply_queue)) + ")$"
    with user_who_may_configure(allowed) as url:
        worker = start_worker(amqp_url=url)
        assert await worker.wait_exit() == 2
    logs = worker.logs()
    assert "Traceback" not in logs
    errors = [e for e in worker.log_events() if e.get("level") == "error"]
    assert len(errors) == 1, errors
    [line] = errors
    text = json.dumps(line)
    assert topo.request_queue in text
    assert "configure" in text
    assert not worker.events("broker_link_down"), "a refusal for good was retried"


# (e) consumer timeout while a reply is refused: tests/integration/test_consumer_timeout.py
