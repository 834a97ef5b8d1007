"""A job held past the broker's `consumer_timeout` while its reply is refused.

The reply queue refuses every reply for 15 s (a policy with `max-length` 0 and
`overflow: reject-publish`) on a node with `consumer_timeout = 5000`, checked every
second. The broker closes the worker's channel (`delivery acknowledgement ... timed
out`) and takes the jobs back, each return counted towards the delivery limit on
RabbitMQ 3.10. The worker keeps publishing the refused replies, and each redelivery is
acknowledged once its reply is confirmed: every job answered, none dead-lettered.
"""

import asyncio
import re

import aio_pika
import orjson
import pytest
from aio_pika.abc import AbstractChannel

from tests.integration.helpers import (
    StartWorker,
    a_job,
    drain,
    queue_depth,
    wait_for,
)
from tests.integration.test_link_detection import answered_ids, publish
from tests.rabbit_nodes import ExtraNode
from worker.transport.link.topology import Topology
from worker.transport.producers.client import PromptClient

pytestmark = pytest.mark.broker

CONSUMER_TIMEOUT_MS = 5000
REFUSED_FOR = 3 * CONSUMER_TIMEOUT_MS / 1000


async def until_applied(node: ExtraNode, policy: str, queue: str, within: float = 60.0) -> None:
    """Until the node lists `policy` as `queue`'s (a policy takes effect a moment after
    rabbitmqctl returns, longer on a busy machine)."""

    async def applied() -> bool:
        listing = await asyncio.to_thread(node.ctl, "list_queues", "name", "policy", "-q")
        return f"{queue}\t{policy}" in listing.stdout.splitlines()

    await wait_for(applied, within, f"policy {policy} on {queue}", interval=0.2)


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
            # The jobs go out once the queue refuses.
            await until_applied(node, "full-replies", topo.reply_queue)
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
            events = worker.log_events()
            # The broker did take the jobs back over its consumer timeout...
            assert any(
                "acknowledgement on channel" in str(e.get("error"))
                for e in events
                if e.get("event") == "broker_link_down"
            )
            # ...and their redeliveries were answered by the replies held for them.
            from_held = {
                e["job_id"]
                for e in events
                if e.get("event") == "job" and e.get("reply_held") and e["attempt"] > 0
            }
            assert from_held
        finally:
            await connection.close()
