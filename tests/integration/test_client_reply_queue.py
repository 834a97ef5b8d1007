"""A producer whose reply queue is deleted under it, through a real worker and RabbitMQ.

An operator's `rabbitmqctl delete_queue` (or a tool clearing queues) cancels the
client's reply consumer while its connection stays up. The worker then settles the
replies it cannot deliver as answered (CONTRACT.md §4), so a client that did nothing
would wait in vain for every call from then on. It declares the queue again, consumes
it and publishes again what was waiting; should the declaration be refused, it
reconnects until it is not.
"""

import asyncio
import signal

import orjson
import pytest
from yarl import URL

from tests.integration.helpers import (
    StartWorker,
    WorkerProcess,
    a_job,
    own_vhost,
    queue_names,
    rabbitmqctl,
    unacked_held_by,
    wait_for,
)
from worker.transport.link.topology import Topology
from worker.transport.producers.client import PromptClient

pytestmark = pytest.mark.broker


def vhost_of(url: str) -> str:
    return URL(url).path.lstrip("/")


def delete_queue(url: str, name: str) -> None:
    rabbitmqctl("delete_queue", "-p", vhost_of(url), name)


async def wait_until_listed(url: str, name: str, present: bool, what: str) -> None:
    async def listed() -> bool:
        return (name in queue_names(url)) is present

    await wait_for(listed, 30, what)


def unroutable_replies(worker: WorkerProcess) -> int:
    return sum(1 for e in worker.log_events() if e.get("event") == "reply_unroutable")


async def test_a_reply_queue_deleted_under_the_client_is_declared_again(
    start_worker: StartWorker, topo: Topology
) -> None:
    with own_vhost("test-client-queue") as url:
        worker = start_worker(amqp_url=url)
        await worker.wait_ready()
        async with PromptClient(url, request_queue=topo.request_queue, timeout=30) as client:
            assert (await client.build(a_job("before")))["status"] == "ok"
            delete_queue(url, client.reply_queue)

            await wait_until_listed(url, client.reply_queue, True, "the reply queue again")
            reply = await client.build(a_job("after"))

        assert reply["status"] == "ok"
        assert reply["job_id"] == "after"
        assert unroutable_replies(worker) == 0


async def test_a_reply_lost_while_the_queue_could_not_be_declared_is_asked_for_again(
    start_worker: StartWorker, topo: Topology
) -> None:
    """The reply queue deleted and declaring it again refused (the vhost's queue limit):
    the worker answers the waiting call into nowhere. Once the limit is lifted the client
    is consuming again and publishes the call once more, which is answered."""
    with own_vhost("test-client-lost") as url:
        worker = start_worker(amqp_url=url)
        await worker.wait_ready()
        async with PromptClient(url, request_queue=topo.request_queue, timeout=90) as client:
            assert (await client.build(a_job("warm-up")))["status"] == "ok"
            # Stopped, the worker holds the next job until the reply queue is gone.
            worker.signal(signal.SIGSTOP)
            try:
                call = asyncio.ensure_future(client.build(a_job("lost-once")))

                async def handed_to_the_worker() -> bool:
                    return unacked_held_by(worker.process.pid) == 1

                await wait_for(handed_to_the_worker, 30, "the job to reach the worker")
                # Set first: the client declares its queue again as soon as it is deleted.
                limit = {"max-queues": len(queue_names(url)) - 1}
                rabbitmqctl("set_vhost_limits", "-p", vhost_of(url), orjson.dumps(limit).decode())
                delete_queue(url, client.reply_queue)
            finally:
                worker.signal(signal.SIGCONT)

            async def answered_into_nowhere() -> bool:
                return unroutable_replies(worker) >= 1

            await wait_for(answered_into_nowhere, 30, "the worker to answer into nowhere")
            assert not call.done()
            rabbitmqctl("set_vhost_limits", "-p", vhost_of(url), '{"max-queues": -1}')
            reply = await call

        assert reply["status"] == "ok"
        assert reply["job_id"] == "lost-once"
        assert client.resent >= 1
