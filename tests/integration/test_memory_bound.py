"""Jobs in flight bounded in bytes, through a real worker and RabbitMQ."""

import aio_pika
import orjson
import pytest
from aio_pika.abc import AbstractChannel

from tests.integration.helpers import StartWorker, a_job, drain, metric_value, queue_depth
from worker.transport.link.topology import Topology

pytestmark = pytest.mark.broker

MIB = 1024 * 1024
BUDGET = 4 * MIB
LARGE_JOBS = 30


async def test_many_large_jobs_never_hold_more_bytes_than_the_budget(
    start_worker: StartWorker, topo: Topology, channel: AbstractChannel
) -> None:
    worker = start_worker("--max-inflight-bytes", str(BUDGET), "--prefetch", "64")
    await worker.wait_ready()
    replies = await channel.declare_queue("", exclusive=True)
    bodies = [
        orjson.dumps(a_job(f"large-{i}", alert_data=f"{i} " + "x" * (MIB - 2048)))
        for i in range(LARGE_JOBS)
    ]
    # Queued before the worker sees any: prefetch 64 would hand it all 30 at once.
    for i, body in enumerate(bodies):
        await channel.default_exchange.publish(
            aio_pika.Message(body, reply_to=replies.name, correlation_id=str(i)),
            routing_key=topo.request_queue,
        )

    answered = await drain(channel, replies.name, LARGE_JOBS)

    assert sorted(int(m.correlation_id or -1) for m in answered) == list(range(LARGE_JOBS))
    assert {orjson.loads(m.body)["status"] for m in answered} == {"ok"}
    text = await worker.metrics_showing("prompt_worker_in_flight_bytes 0.0")
    peak = metric_value(text, "prompt_worker_in_flight_bytes_peak")
    # More than one job at a time (the budget is used), never more than it allows.
    assert max(len(b) for b in bodies) < peak <= BUDGET
    assert metric_value(text, "prompt_worker_in_flight_bytes") == 0
    # Having seen jobs of about a MiB, the worker asked the broker for fewer at a time.
    switches = [e for e in worker.log_events() if e.get("event") == "prefetch_switched"]
    assert switches and switches[0]["prefetch"] < 64
    assert switches[0]["prefetch"] * max(len(b) for b in bodies) <= BUDGET

    # A job larger than the whole budget is still handled: alone.
    huge = orjson.dumps(a_job("huge", alert_data="y" * (BUDGET + MIB)))
    await channel.default_exchange.publish(
        aio_pika.Message(huge, reply_to=replies.name, correlation_id="huge"),
        routing_key=topo.request_queue,
    )
    [reply] = await drain(channel, replies.name, 1)
    assert orjson.loads(reply.body)["status"] == "ok"
    _, text = await worker.http_get("/metrics")
    assert metric_value(text, "prompt_worker_in_flight_bytes_peak") == len(huge)
    assert await queue_depth(channel, topo.request_queue) == 0
