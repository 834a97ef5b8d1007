"""Jobs through a real worker and RabbitMQ: what comes back, where, and what is kept."""

import asyncio
import uuid
from typing import Any

import aio_pika
import orjson
import pytest
from aio_pika.abc import AbstractChannel

from tests.data import SEED_000_KINDS
from tests.integration.helpers import (
    BASE_CASE,
    CASES,
    StartWorker,
    a_job,
    drain,
    queue_depth,
    wait_for,
)
from worker.transport.link.topology import Topology
from worker.transport.producers.client import PromptClient

pytestmark = pytest.mark.broker


# uvloop is the default where installed (it is a dependency); asyncio's own loop must
# serve alike.
@pytest.mark.parametrize(("loop_choice", "loop_name"), [("auto", "uvloop"), ("asyncio", "asyncio")])
async def test_every_seed_000_kind_end_to_end(
    start_worker: StartWorker, client: PromptClient, loop_choice: str, loop_name: str
) -> None:
    assert {case["job"]["kind"] for case in CASES} == SEED_000_KINDS
    worker = start_worker(env={"PROMPT_WORKER_EVENT_LOOP": loop_choice})
    await worker.wait_ready()
    [starting] = [e for e in worker.log_events() if e.get("event") == "starting"]
    assert starting["event_loop"] == loop_name
    # Start-up's objects (the modules, the renderer's models) are frozen for the collector.
    assert starting["frozen_objects"] > 50_000

    replies = await asyncio.gather(*(client.build(case["job"], timeout=60) for case in CASES))

    for case, reply in zip(CASES, replies, strict=True):
        assert reply["status"] == "ok", reply
        assert reply["job_id"] == case["job"]["job_id"]
        assert reply["messages"] == case["expected_messages"], case["job"]["job_id"]


async def test_reply_goes_to_reply_to_with_the_correlation_id(
    start_worker: StartWorker, topo: Topology, channel: AbstractChannel
) -> None:
    worker = start_worker()
    await worker.wait_ready()
    reply_queue = await channel.declare_queue("", exclusive=True)

    await channel.default_exchange.publish(
        aio_pika.Message(
            orjson.dumps(a_job("job-rpc")), reply_to=reply_queue.name, correlation_id="corr-42"
        ),
        routing_key=topo.request_queue,
    )
    [reply] = await drain(channel, reply_queue.name, 1)

    assert reply.correlation_id == "corr-42"
    assert reply.content_type == "application/json"
    body = orjson.loads(reply.body)
    assert body["job_id"] == "job-rpc"
    assert body["messages"] == BASE_CASE["expected_messages"]
    # The reply went to reply_to only, and the request was acknowledged.
    assert await queue_depth(channel, topo.reply_queue) == 0
    await wait_for(lambda: _empty(channel, topo.request_queue), 30, "request acked")


async def _empty(channel: AbstractChannel, name: str) -> bool:
    return await queue_depth(channel, name) == 0


async def test_without_reply_to_the_reply_goes_to_the_reply_queue_keyed_by_job_id(
    start_worker: StartWorker, topo: Topology, channel: AbstractChannel
) -> None:
    worker = start_worker()
    await worker.wait_ready()

    await channel.default_exchange.publish(
        aio_pika.Message(orjson.dumps(a_job("job-no-reply-to"))), routing_key=topo.request_queue
    )
    [reply] = await drain(channel, topo.reply_queue, 1)

    # No correlation id in the request: the job id stands in for it.
    assert reply.correlation_id == "job-no-reply-to"
    assert reply.content_type == "application/json"
    assert reply.delivery_mode == aio_pika.DeliveryMode.PERSISTENT
    assert orjson.loads(reply.body)["messages"] == BASE_CASE["expected_messages"]


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b'{"job_id": "broken", "kind": ', "invalid_json"),
        (b'{"job_id": "bad-kind", "kind": "no-such-kind"}', "invalid_job"),
        (orjson.dumps(a_job("too-big", alert_data="x" * 5000)), "payload_too_large"),
    ],
    ids=["invalid_json", "invalid_job", "payload_too_large"],
)
async def test_bad_input_gets_an_error_reply_and_is_dead_lettered(
    start_worker: StartWorker,
    topo: Topology,
    client: PromptClient,
    channel: AbstractChannel,
    body: bytes,
    code: str,
) -> None:
    worker = start_worker("--max-message-bytes", "4096")
    await worker.wait_ready()

    reply = await client.build_bytes(body, timeout=60)

    assert reply["status"] == "error"
    assert reply["error"]["code"] == code
    [dead] = await drain(channel, topo.dead_letter_queue, 1)
    assert dead.body == body
    deaths: Any = dead.headers["x-death"]
    [death] = deaths
    assert death["reason"] == "rejected"
    assert death["queue"] == topo.request_queue
    assert worker.process.poll() is None


async def test_the_worker_keeps_serving_after_bad_input(
    start_worker: StartWorker, client: PromptClient
) -> None:
    worker = start_worker()
    await worker.wait_ready()
    bodies = [b"", b"null", b"[]", b"\xff\xfe", b'{"job_id": 1}', b"{" * 10_000]
    replies = await asyncio.gather(*(client.build_bytes(b, timeout=60) for b in bodies))
    assert {r["status"] for r in replies} == {"error"}

    ok = await client.build(a_job("after-bad-input"), timeout=60)
    assert ok["status"] == "ok"


async def test_a_vanished_reply_to_does_not_make_the_job_loop(
    start_worker: StartWorker, topo: Topology, channel: AbstractChannel
) -> None:
    worker = start_worker()
    await worker.wait_ready()
    gone = f"gone-{uuid.uuid4().hex}"

    await channel.default_exchange.publish(
        aio_pika.Message(orjson.dumps(a_job("orphan")), reply_to=gone, correlation_id="c1"),
        routing_key=topo.request_queue,
    )

    async def settled() -> bool:
        return any(
            e.get("event") == "job" and e.get("job_id") == "orphan" for e in worker.log_events()
        )

    await wait_for(settled, 60, "the orphan job to be settled")
    [line] = [e for e in worker.log_events() if e.get("event") == "job"]
    assert line["settled"] == "acked"
    assert any(e.get("event") == "reply_unroutable" for e in worker.log_events())
    assert await queue_depth(channel, topo.request_queue) == 0
    assert await queue_depth(channel, topo.dead_letter_queue) == 0


async def test_concurrent_calls_on_one_client_each_get_their_own_reply(
    start_worker: StartWorker, client: PromptClient
) -> None:
    worker = start_worker()
    await worker.wait_ready()
    ids = [f"job-{i}" for i in range(300)]
    replies = await asyncio.gather(*(client.build(a_job(i), timeout=60) for i in ids))
    assert [r["job_id"] for r in replies] == ids
