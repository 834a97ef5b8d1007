"""A render that overruns its deadline, through a real worker and RabbitMQ.

The job is made slow (a busy loop) on purpose: the worker is the test-only entry point
`tests.faulty_serve`, serve with a renderer that misbehaves on request. It must neither hold the other jobs
up nor loop: its render is abandoned on the event loop, then in the helper process
(which is killed and replaced) on every delivery, and its last delivery is answered
`render_timeout` and dead-lettered.
"""

from typing import Any

import aio_pika
import orjson
import pytest
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage

from tests.faulty_serve import FAULTY_SERVE, SLOW_RENDER
from tests.integration.helpers import (
    REPLY_TIMEOUT,
    StartWorker,
    a_job,
    alive,
    children,
    drain,
    metric_value,
    queue_depth,
    wait_for,
)
from worker.transport.link.topology import Topology

pytestmark = pytest.mark.broker

DELIVERY_LIMIT = 2
OTHERS = 20


async def test_a_render_past_the_deadline_is_abandoned_answered_and_dead_lettered(
    start_worker: StartWorker, topo: Topology, channel: AbstractChannel
) -> None:
    worker = start_worker(
        "--render-timeout",
        "2",
        "--delivery-limit",
        str(DELIVERY_LIMIT),
        entry=FAULTY_SERVE,
    )
    await worker.wait_ready()
    # The helper is started before the worker consumes.
    helpers_before = set(children(worker.pid))
    assert helpers_before
    replies = await channel.declare_queue("", exclusive=True)

    slow_body = orjson.dumps(a_job("slow", alert_data=SLOW_RENDER.decode()))
    await channel.default_exchange.publish(
        aio_pika.Message(slow_body, reply_to=replies.name, correlation_id="slow"),
        routing_key=topo.request_queue,
    )
    for i in range(OTHERS):
        await channel.default_exchange.publish(
            aio_pika.Message(
                orjson.dumps(a_job(f"other-{i}")), reply_to=replies.name, correlation_id=f"o{i}"
            ),
            routing_key=topo.request_queue,
        )

    # Every reply, in the order the worker sent them.
    received: list[AbstractIncomingMessage] = await drain(
        channel, replies.name, OTHERS + 1, within=REPLY_TIMEOUT * 2
    )
    order = [m.correlation_id for m in received]
    # The other jobs were all answered while the slow one was still being retried.
    assert order[-1] == "slow", order
    assert all(orjson.loads(m.body)["status"] == "ok" for m in received[:-1])
    slow: dict[str, Any] = orjson.loads(received[-1].body)
    assert slow["status"] == "error"
    assert slow["job_id"] == "slow"
    assert slow["kind"] == "react"
    assert slow["error"]["code"] == "render_timeout"

    [dead] = await drain(channel, topo.dead_letter_queue, 1)
    assert dead.body == slow_body
    deaths: Any = dead.headers["x-death"]
    [death] = deaths
    assert death["reason"] == "rejected"
    assert await queue_depth(channel, topo.request_queue) == 0

    # One delivery, then DELIVERY_LIMIT more: each overran the helper's deadline (and the
    # first also its slice of the event loop), so the helper was killed each time.
    deliveries = DELIVERY_LIMIT + 1
    _, text = await worker.http_get("/metrics")
    assert metric_value(text, 'prompt_worker_render_timeouts_total{where="helper"}') == deliveries
    assert metric_value(text, 'prompt_worker_render_timeouts_total{where="event_loop"}') == 1
    lines = [e for e in worker.log_events() if e.get("event") == "job" and e.get("job_id")]
    slow_lines = [e for e in worker.log_events() if e.get("event") == "job" and e["job_id"] is None]
    assert len(slow_lines) == DELIVERY_LIMIT  # the retries, unanswered
    assert [e["settled"] for e in lines if e["job_id"] == "slow"] == ["dead_lettered"]
    assert [e["attempt"] for e in slow_lines] == list(range(DELIVERY_LIMIT))

    # The helper that was killed last is gone; a new one serves the next big job.
    helpers_after = set(children(worker.pid))
    assert not any(alive(pid) for pid in helpers_before - helpers_after)
    assert helpers_before - helpers_after
    big = a_job("big-after", alert_data="x" * 400_000)
    await channel.default_exchange.publish(
        aio_pika.Message(orjson.dumps(big), reply_to=replies.name, correlation_id="big"),
        routing_key=topo.request_queue,
    )
    [after] = await drain(channel, replies.name, 1)
    assert orjson.loads(after.body)["status"] == "ok"

    async def logged() -> bool:
        return any(e.get("job_id") == "big-after" for e in worker.log_events())

    # The job's log line follows its reply (it is written once the job is settled).
    await wait_for(logged, 30, "the big job's log line")
    [line] = [e for e in worker.log_events() if e.get("job_id") == "big-after"]
    assert line["offloaded"] is True
