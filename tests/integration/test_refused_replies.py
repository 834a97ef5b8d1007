"""Replies the broker refuses, through a real worker and RabbitMQ (CONTRACT.md §4).

Each refusal has one defined outcome, and none may turn into a hot loop: a refused
reply (full reply queue) is backpressure: the job is held and its reply published again,
with a growing pause, until the queue has room, never dead-lettered;
a deleted default reply queue is declared again; a reply above the broker's
`max_message_size` becomes a `payload_too_large` error reply; a bug in the render path
is retried with a pause, then answered `internal`. Every test bounds how often the job
was handled by counting the worker's log lines. And a job above the broker's limit
fails its producer's call at once, with the broker's reason.
"""

import asyncio
import json
import re
from collections.abc import Iterator
from typing import Any

import aio_pika
import orjson
import pytest
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage
from yarl import URL

from tests.faulty_serve import FAULTY_SERVE, HANDLER_BUG
from tests.integration.helpers import (
    StartWorker,
    a_job,
    archive_stream,
    drain,
    metric_value,
    own_vhost,
    queue_depth,
    queue_names,
    rabbitmqctl,
    wait_for,
)
from tests.rabbit_nodes import ExtraNode
from worker.transport.link.topology import Topology
from worker.transport.producers.client import PromptClient, PromptClientError, PromptTimeout

pytestmark = pytest.mark.broker

DELIVERY_LIMIT = 2
# Every delivery the queue allows: the first and DELIVERY_LIMIT more.
DELIVERIES = DELIVERY_LIMIT + 1


def error_of(reply: AbstractIncomingMessage, job_id: str) -> dict[str, Any]:
    """The `error` member of an error reply to `job_id`."""
    answer = orjson.loads(reply.body)
    assert answer["status"] == "error"
    assert answer["job_id"] == job_id
    error: dict[str, Any] = answer["error"]
    return error


async def test_a_reply_the_broker_refuses_is_held_until_the_queue_has_room(
    start_worker: StartWorker, topo: Topology, channel: AbstractChannel
) -> None:
    """A nack is the broker's reason, not the job's: the job is neither requeued nor
    dead-lettered, however long the refusal lasts. The worker holds it, takes no other
    job, reports not ready, and answers it once the reply queue has room."""
    worker = start_worker("--delivery-limit", str(DELIVERY_LIMIT))
    await worker.wait_ready()
    # A caller's reply queue that is full and refuses what does not fit.
    full = await channel.declare_queue(
        "", exclusive=True, arguments={"x-max-length": 1, "x-overflow": "reject-publish"}
    )
    await channel.default_exchange.publish(aio_pika.Message(b"filler"), routing_key=full.name)
    await channel.default_exchange.publish(
        aio_pika.Message(orjson.dumps(a_job("refused")), reply_to=full.name),
        routing_key=topo.request_queue,
    )

    async def unready() -> bool:
        status, body = await worker.http_get("/readyz")
        return status == 503 and json.loads(body)["replies_accepted"] is False

    await wait_for(unready, 60, "the worker to report the refused replies")

    # More refusals than the queue allows deliveries: a requeueing worker would have
    # dead-lettered the job by now.
    async def refused_again() -> bool:
        return len(worker.events("reply_republish_failed")) > DELIVERIES

    await wait_for(refused_again, 90, "the reply to be refused again and again")
    # Delivered while replies are refused: it waits at the door, unrendered.
    await channel.default_exchange.publish(
        aio_pika.Message(orjson.dumps(a_job("waiting"))), routing_key=topo.request_queue
    )

    async def delivered() -> bool:
        return await queue_depth(channel, topo.request_queue) == 0

    await wait_for(delivered, 30, "the waiting job to be delivered")
    status, body = await worker.http_get("/readyz")
    assert status == 503
    assert json.loads(body) == {
        "ready": False,
        "connected": True,
        "consuming": True,
        "accepting": True,
        "unblocked": True,
        "replies_accepted": False,
        "archive": {
            "stream": archive_stream(topo),
            "connected": True,
            "recording": True,
            "last_problem": None,
            "lost": {},
        },
    }
    exposition = (await worker.http_get("/metrics"))[1]
    assert metric_value(exposition, "prompt_worker_replies_held") == 1
    assert metric_value(exposition, "prompt_worker_in_flight") == 1
    assert metric_value(exposition, 'prompt_worker_reply_refusals_total{cause="nack"}') > DELIVERIES
    assert not worker.job_lines(), "no job settled, nor the waiting one rendered"
    [refused] = worker.events("reply_refused")
    assert refused["job_id"] == "refused"
    [backpressure] = worker.events("reply_backpressure")
    assert backpressure["reason"] == "the broker refused the reply (nack)"
    assert await queue_depth(channel, topo.dead_letter_queue) == 0

    # Room in the caller's queue: the held reply gets through, then the waiting job.
    [filler] = await drain(channel, full.name, 1)
    assert filler.body == b"filler"
    [reply] = await drain(channel, full.name, 1)
    assert orjson.loads(reply.body)["job_id"] == "refused"
    [after] = await drain(channel, topo.reply_queue, 1)
    assert orjson.loads(after.body)["job_id"] == "waiting"
    await worker.wait_ready()
    lines = await worker.logged_jobs(2)
    assert sorted((e["job_id"], e["settled"], e["attempt"]) for e in lines) == [
        ("refused", "acked", 0),
        ("waiting", "acked", 0),
    ]
    assert len(worker.events("reply_backpressure_cleared")) == 1
    assert await queue_depth(channel, topo.dead_letter_queue) == 0
    assert await queue_depth(channel, topo.request_queue) == 0
    assert metric_value((await worker.http_get("/metrics"))[1], "prompt_worker_replies_held") == 0


async def test_a_default_reply_queue_deleted_under_the_worker_is_declared_again(
    start_worker: StartWorker, topo: Topology, channel: AbstractChannel
) -> None:
    worker = start_worker()
    await worker.wait_ready()
    await channel.queue_delete(topo.reply_queue)

    for job_id in ("first-after-delete", "second-after-delete"):
        await channel.default_exchange.publish(
            aio_pika.Message(orjson.dumps(a_job(job_id))), routing_key=topo.request_queue
        )

        async def answered(job_id: str = job_id) -> bool:
            return any(e.get("job_id") == job_id for e in worker.job_lines())

        # Reading the queue before the worker declared it again would fail.
        await wait_for(answered, 60, f"{job_id} to be answered")
        [reply] = await drain(channel, topo.reply_queue, 1)
        assert orjson.loads(reply.body)["job_id"] == job_id

    # Declared again once, by the first job; both jobs answered and acknowledged once.
    assert len(worker.events("reply_queue_redeclared")) == 1
    assert [e["settled"] for e in worker.job_lines()] == ["acked", "acked"]
    assert await queue_depth(channel, topo.request_queue) == 0
    assert await queue_depth(channel, topo.dead_letter_queue) == 0


async def test_a_reply_queue_that_cannot_be_declared_again_stalls_nothing(
    start_worker: StartWorker, topo: Topology
) -> None:
    """The default reply queue deleted, and declaring it again refused (the vhost's queue
    limit): the channel the refusal closed cannot be restored either. The worker keeps
    the job, reconnects until the queue can be declared, then answers it."""
    with own_vhost("test-redeclare") as url:
        worker = start_worker(amqp_url=url)
        await worker.wait_ready()
        connection = await aio_pika.connect(url)
        async with connection:
            channel = await connection.channel()
            await channel.queue_delete(topo.reply_queue)

            async def deleted() -> bool:
                return topo.reply_queue not in queue_names(url)

            await wait_for(deleted, 30, "the reply queue to be deleted")
            vhost = URL(url).path.lstrip("/")
            limit = {"max-queues": len(queue_names(url))}
            rabbitmqctl("set_vhost_limits", "-p", vhost, orjson.dumps(limit).decode())
            await channel.default_exchange.publish(
                aio_pika.Message(orjson.dumps(a_job("held"))), routing_key=topo.request_queue
            )

            async def reconnecting() -> bool:
                return bool(worker.events("channel_not_restored"))

            # Left alone, the closed channel stays closed for good: the worker must
            # reconnect (and keeps failing to restore the channel while the limit holds).
            await wait_for(reconnecting, 60, "the worker to reconnect, its channel closed")

            async def restore_refused() -> bool:
                return bool(worker.events("broker_restore_refused"))

            # Each reconnect connects, and the broker refuses to restore the channel: an
            # attempt that reached the broker is not reported as an unreachable broker.
            await wait_for(restore_refused, 60, "a reconnect whose restore is refused")
            [refused, *_] = worker.events("broker_restore_refused")
            assert "queue limit" in refused["error"]
            assert not worker.events("broker_unreachable")
            # The worker's own lines tell it all; the library's error line is not shown.
            assert "Callback <OneShotCallback" not in worker.logs()
            assert worker.events("reply_queue_declare_failed")
            assert not any(e.get("settled") == "acked" for e in worker.job_lines())
            assert await queue_depth(channel, topo.request_queue) == 1  # kept, not lost

            rabbitmqctl("set_vhost_limits", "-p", vhost, '{"max-queues": -1}')
            await channel.default_exchange.publish(
                aio_pika.Message(orjson.dumps(a_job("after"))), routing_key=topo.request_queue
            )

            async def declared_again() -> bool:
                return topo.reply_queue in queue_names(url)

            # Reading the queue before the worker declared it again would fail.
            await wait_for(declared_again, 60, "the worker to declare its reply queue again")
            replies = await drain(channel, topo.reply_queue, 2)
            assert sorted(orjson.loads(r.body)["job_id"] for r in replies) == ["after", "held"]
            assert await queue_depth(channel, topo.request_queue) == 0
            assert await queue_depth(channel, topo.dead_letter_queue) == 0
            await worker.wait_ready()


async def test_a_bug_in_the_render_path_is_retried_with_backoff_then_answered_internal(
    start_worker: StartWorker, topo: Topology, channel: AbstractChannel
) -> None:
    worker = start_worker("--delivery-limit", str(DELIVERY_LIMIT), entry=FAULTY_SERVE)
    await worker.wait_ready()
    body = orjson.dumps(a_job("buggy", alert_data=HANDLER_BUG.decode()))
    await channel.default_exchange.publish(aio_pika.Message(body), routing_key=topo.request_queue)

    [reply] = await drain(channel, topo.reply_queue, 1)
    [dead] = await drain(channel, topo.dead_letter_queue, 1)

    error = error_of(reply, "buggy")
    assert error["code"] == "internal"
    assert "InjectedFault" in error["message"]
    assert dead.body == body
    lines = await worker.logged_jobs(DELIVERIES)
    assert [e["settled"] for e in lines] == ["requeued"] * DELIVERY_LIMIT + ["dead_lettered"]
    assert [e["attempt"] for e in lines] == list(range(DELIVERIES))
    assert all("InjectedFault" in e["reason"] for e in lines[:-1])
    # The pause grows with each delivery instead of handing the job straight back.
    pauses = [e["backoff_s"] for e in lines[:-1]]
    assert 0 < pauses[0] < pauses[1]
    assert worker.process.poll() is None


# A tool schema rendered into the prompt grows by about a quarter (indented JSON), so
# a job just under the broker's limit has a reply above it.
NODE_LIMIT = 1024 * 1024


@pytest.fixture(scope="module")
def small_limit_node() -> Iterator[ExtraNode]:
    """A node whose `max_message_size` is NODE_LIMIT, shared by the tests of that limit:
    each has queues of its own (`topo`) and a worker or client of its own on it, so one
    node start serves them all."""
    with ExtraNode("hardlimit", conf=f"max_message_size = {NODE_LIMIT}") as node:
        yield node


def job_with_a_reply_above(limit: int) -> bytes:
    job = a_job("huge-reply")
    properties = {f"p{i}": {"type": "string", "enum": [[[[1]]]]} for i in range(22_000)}
    job["tools"] = [
        {
            "name": "prometheus-server.query",
            "description": "d",
            "input_schema": {"type": "object", "properties": properties},
        }
    ]
    body = orjson.dumps(job)
    assert len(body) < limit
    return body


@pytest.mark.slow
async def test_a_reply_above_the_brokers_max_message_size_becomes_an_error_reply(
    start_worker: StartWorker, topo: Topology, small_limit_node: ExtraNode
) -> None:
    body = job_with_a_reply_above(NODE_LIMIT)
    node = small_limit_node
    worker = start_worker("--delivery-limit", str(DELIVERY_LIMIT), amqp_url=node.url)
    await worker.wait_ready()
    connection = await aio_pika.connect(node.url)
    async with connection:
        channel = await connection.channel()
        replies = await channel.declare_queue("", exclusive=True)
        await channel.default_exchange.publish(
            aio_pika.Message(body, reply_to=replies.name, correlation_id="huge"),
            routing_key=topo.request_queue,
        )
        [reply] = await drain(channel, replies.name, 1)
        [dead] = await drain(channel, topo.dead_letter_queue, 1)

        error = error_of(reply, "huge-reply")
        assert error["code"] == "payload_too_large"
        [detail] = error["details"]
        assert detail["type"] == "reply_too_large"
        assert re.search(rf"limit of {NODE_LIMIT} bytes", error["message"])
        assert dead.body == body
        # The first delivery's reply cost a channel; the limit learned from it, the
        # second delivery was answered with the error. No third.
        [learned] = worker.events("broker_max_message_size")
        assert learned["limit_bytes"] == NODE_LIMIT
        lines = await worker.logged_jobs(2)
        assert [e["settled"] for e in lines] == ["unsettled", "dead_lettered"]

        # The worker is still consuming on its reopened channel.
        await channel.default_exchange.publish(
            aio_pika.Message(
                orjson.dumps(a_job("small")), reply_to=replies.name, correlation_id="s"
            ),
            routing_key=topo.request_queue,
        )
        [small] = await drain(channel, replies.name, 1)
        assert orjson.loads(small.body)["status"] == "ok"
        assert await queue_depth(channel, topo.request_queue) == 0
        assert worker.process.poll() is None


@pytest.mark.slow
async def test_a_job_above_the_brokers_max_message_size_fails_its_call_not_the_client(
    start_worker: StartWorker, topo: Topology, small_limit_node: ExtraNode
) -> None:
    """The broker refuses the job itself and closes the client's channel over it, under
    the calls in flight with it too. The call fails at once with the broker's reason,
    not after its timeout; the others are answered, and the client goes on."""
    node = small_limit_node
    worker = start_worker(amqp_url=node.url)
    await worker.wait_ready()
    async with PromptClient(node.url, request_queue=topo.request_queue, timeout=120) as client:
        too_big = orjson.dumps({**a_job("too-big"), "padding": "x" * NODE_LIMIT})
        before = [client.build(a_job(f"before-{n}")) for n in range(5)]
        refused = client.call(too_big, job_id="too-big")
        after = [client.build(a_job(f"after-{n}")) for n in range(5)]
        *answers, raised = await asyncio.gather(*before, *after, refused, return_exceptions=True)
        assert isinstance(raised, PromptClientError), raised
        assert not isinstance(raised, PromptTimeout)
        assert "larger than" in str(raised)  # the broker's reason
        reply = await client.build(a_job("later"))

    assert [a["status"] for a in answers if isinstance(a, dict)] == ["ok"] * 10, answers
    assert reply["status"] == "ok"
    assert not any(e.get("job_id") == "too-big" for e in worker.job_lines())
