"""`PromptClient` over a cluster's addresses: after losing its node it reconnects round
the list, trying the next address after every failed attempt, not only the node it lost.

The "nodes" are two TCP proxies in front of the shared broker, which a test stops and
starts: a node that dies, or stays down while another comes back. A reconnect that the
broker refuses for its credentials is not waited out.
"""

import contextlib
import uuid
from collections.abc import AsyncIterator

import pytest
from yarl import URL

from tests.integration.helpers import StartWorker, TcpProxy, a_job, rabbitmqctl, wait_for
from tests.integration.test_broker_failures import broker_user
from worker.transport.link.topology import Topology
from worker.transport.producers.client import PromptAccessRefused, PromptClient

pytestmark = pytest.mark.broker


def linked_through(client: PromptClient, proxy: TcpProxy) -> bool:
    """Whether the client's connection is up, through `proxy`."""
    return client.broker == f"127.0.0.1:{proxy.port}"


async def a_build_works(client: PromptClient, job_id: str) -> None:
    reply = await client.build(a_job(job_id), timeout=60)
    assert reply["status"] == "ok", reply


@contextlib.asynccontextmanager
async def two_nodes(
    start_worker: StartWorker, *, second_up: bool
) -> AsyncIterator[tuple[TcpProxy, TcpProxy, str]]:
    """A worker on the shared broker and two "nodes" in front of it, the first up and
    the second as asked; the proxies and the client URL naming both, in that order."""
    worker = start_worker()
    await worker.wait_ready()
    first, second = TcpProxy(), TcpProxy()
    await first.start()
    if second_up:
        await second.start()
    try:
        yield (
            first,
            second,
            f"{first.url}?reconnect_interval=0.2,{second.url}?reconnect_interval=0.2",
        )
    finally:
        await first.stop()
        await second.stop()


async def test_a_lost_node_is_left_for_the_next_address(
    start_worker: StartWorker, topo: Topology
) -> None:
    async with (
        two_nodes(start_worker, second_up=True) as (first, second, urls),
        PromptClient(urls, request_queue=topo.request_queue) as client,
    ):
        assert linked_through(client, first)
        await a_build_works(client, "failover-before")
        await first.stop()  # the node dies and stays down

        async def on_second() -> bool:
            return linked_through(client, second)

        await wait_for(on_second, 30, "the client to reconnect through the second address")
        await a_build_works(client, "failover-after")


async def test_failed_attempts_go_round_every_address(
    start_worker: StartWorker, topo: Topology
) -> None:
    """The link on the first address is lost while the second is down: the next attempt
    (on the second) fails, and the one after must go back to the first, which is up
    again; a client that only moved on when a link was lost would keep trying the
    second for ever."""
    async with (
        two_nodes(start_worker, second_up=False) as (first, _, urls),
        PromptClient(urls, request_queue=topo.request_queue) as client,
    ):
        assert linked_through(client, first)
        await first.stop()  # lost: the next attempt goes to the second, which is down
        await first.start()

        async def on_first() -> bool:
            return linked_through(client, first)

        await wait_for(on_first, 30, "the client to come back through the first address")
        await a_build_works(client, "failover-round")


def close_connections_of_user(user: str) -> int:
    """Close the shared broker's connections of `user` (only ours: the broker is shared)."""
    listing = rabbitmqctl("list_connections", "pid", "user", "-q")
    closed = 0
    for connection, _, owner in (line.partition("\t") for line in listing.splitlines()):
        if owner.strip() == user:
            rabbitmqctl("close_connection", connection, "test")
            closed += 1
    return closed


async def test_credentials_refused_on_a_reconnect_fail_the_calls_at_once(
    start_worker: StartWorker, topo: Topology
) -> None:
    """The password is rotated and the client's connection dropped: its reconnect
    presents the old password, which no node will take. Calls fail with
    `PromptAccessRefused` instead of waiting out their timeout."""
    worker = start_worker()
    await worker.wait_ready()
    with broker_user("test-client-revoked", (".*", ".*", ".*")) as url:
        async with PromptClient(url, request_queue=topo.request_queue) as client:
            await a_build_works(client, "before-revoke")
            user = URL(url).user
            assert user is not None
            rabbitmqctl("change_password", user, uuid.uuid4().hex)
            assert close_connections_of_user(user) == 1
            with pytest.raises(PromptAccessRefused, match="access refused by the broker at "):
                await client.build(a_job("after-revoke"), timeout=60)
            with pytest.raises(PromptAccessRefused):
                await client.build(a_job("later"), timeout=60)
