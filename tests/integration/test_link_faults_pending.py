"""A half-open broker connection, a declare refused at start-up, and a job held past the
broker's `consumer_timeout` while its reply is refused, through a real worker and
RabbitMQ (issue 33). The consumer timeout runs on a node of its own
(tests/rabbit_nodes.py, under `flock /tmp/extra-nodes.lock`).

The half-open connection is the tests' TCP proxy holding every byte in both directions
with the connections left open (no RST, no FIN): only heartbeats can tell. The bound
"within twice the heartbeat" is a timeout (a hang fails the test); the measured times
are printed for docs/OPERATIONS.md ("Clusters").

These fail against the worker as this file was written, and are kept apart so the lead
can decide at merge: the worker notices a silent link through aiormq's heartbeat check,
which allows three missed heartbeats plus a second each ((4 + 1) x 3 = 15 s with
`heartbeat=4`, measured 15.6-16.9 s), not two; and on RabbitMQ 3.10 its
`broker_permission_refused` line names the queue but not the permission (the broker's
text says only "access to queue ... refused"; 4.0's says "configure access", so there
the second test passes); and a reply refused (reply queue full) is retried a few times
with a pause and then dead-lettered, so of the jobs held past the consumer timeout
only some are answered. The broker-link rewrite of issue 33 (refused replies as
backpressure) is to close all three.
"""

import asyncio
import contextlib
import json
import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

import aio_pika
import orjson
import pytest
from aio_pika.abc import AbstractChannel

from tests.integration.helpers import (
    AMQP_URL,
    StartWorker,
    TcpProxy,
    WorkerProcess,
    a_job,
    drain,
    queue_depth,
    rabbitmqctl,
    wait_for,
)
from tests.rabbit_nodes import ExtraNode
from worker.transport.broker_failures import broker_address
from worker.transport.client import PromptClient
from worker.transport.topology import Topology

pytestmark = pytest.mark.broker

HEARTBEAT = 4  # seconds, asked for in the worker's URL
JOBS = 300


def named(worker: WorkerProcess, event: str) -> list[dict[str, Any]]:
    return [e for e in worker.log_events() if e.get("event") == event]


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
            return bool(named(worker, "broker_link_down"))

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
    assert not named(worker, "broker_link_down"), "a refusal for good was retried"


# --- (e) consumer timeout while a reply is refused ------------------------------------

CONSUMER_TIMEOUT_MS = 5000
REFUSED_FOR = 3 * CONSUMER_TIMEOUT_MS / 1000


@pytest.mark.slow
async def test_a_job_held_past_the_consumer_timeout_while_its_reply_is_refused_is_not_lost(
    start_worker: StartWorker, topo: Topology
) -> None:
    node = ExtraNode("ctimeout", conf=f"consumer_timeout = {CONSUMER_TIMEOUT_MS}")
    node.fresh = True
    # The broker checks consumer timeouts on its channel tick (every minute by default).
    node.state_dir.mkdir(parents=True, exist_ok=True)
    (node.state_dir / "advanced.config").write_text(
        "[{rabbit, [{channel_tick_interval, 1000}]}].\n"
    )
    with node:
        worker = start_worker(amqp_url=node.url + "?reconnect_interval=0.2")
        await worker.wait_ready()
        connection = await aio_pika.connect(node.url)
        try:
            channel: AbstractChannel = await connection.channel()
            async with PromptClient(node.url, request_queue=topo.request_queue) as client:
                assert (await client.build(a_job("warm-up"), timeout=60))["status"] == "ok"
            # The reply queue refuses every reply (full, reject-publish) for a while.
            await asyncio.to_thread(
                node.ctl,
                "set_policy",
                "full-replies",
                f"^{re.escape(topo.reply_queue)}$",
                '{"max-length": 0, "overflow": "reject-publish"}',
                "--apply-to",
                "queues",
            )
            ids = [f"held-{i}" for i in range(5)]
            await publish(channel, topo.request_queue, ids)
            await asyncio.sleep(REFUSED_FOR)
            await asyncio.to_thread(node.ctl, "clear_policy", "full-replies")
            try:
                replies = await drain(channel, topo.reply_queue, len(ids), within=180)
            except AssertionError as exc:
                dead = await queue_depth(channel, topo.dead_letter_queue)
                raise AssertionError(f"{exc}; {dead} dead-lettered") from exc
            assert answered_ids(replies) == set(ids)
            assert all(orjson.loads(r.body)["status"] == "ok" for r in replies)
            assert await queue_depth(channel, topo.dead_letter_queue) == 0
            assert worker.process.poll() is None
            timed_out = "consumer_cancelled_by_broker" in worker.logs() or any(
                e.get("event") == "broker_link_down" for e in worker.log_events()
            )
            print(f"\nconsumer timeout: the broker took the jobs back: {timed_out}")
        finally:
            await connection.close()
