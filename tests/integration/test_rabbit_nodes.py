"""The extra-node tool that broker-breaking tests stand on actually gives a broker, and
its nodes never collide with another run's."""

import asyncio
import json

import aio_pika
import pytest

from tests.rabbit_nodes import DIST_OFFSET, ExtraCluster, ExtraNode


async def _round_trip(url: str, queue_name: str, body: bytes) -> bytes:
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(queue_name, durable=True)
        await channel.default_exchange.publish(
            aio_pika.Message(body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
            routing_key=queue_name,
        )
        message = await queue.get(timeout=10)
        assert message is not None
        await message.ack()
        return message.body


@pytest.mark.slow
async def test_extra_node_serves_amqp_survives_an_app_restart_and_stops() -> None:
    with ExtraNode("nodetool") as node:
        assert await _round_trip(node.url, "probe", b"one") == b"one"
        # The durable queue outlives stop_app/start_app: the node's state is its own.
        node.stop_app()
        node.start_app()
        queues = node.ctl("list_queues", "name", "--quiet").stdout.split()
        assert "probe" in queues
        assert await _round_trip(node.url, "probe", b"two") == b"two"
        state = node.state_dir
        assert state.is_dir()
    with pytest.raises(OSError):
        await aio_pika.connect(node.url, timeout=3)
    assert not state.exists()  # named for this run: its state goes with it


def test_nodes_of_one_label_get_their_own_names_and_ports() -> None:
    # What two suites running the same test do: the same label, at the same time.
    nodes = [ExtraNode("same") for _ in range(20)]
    assert len({node.name for node in nodes}) == 20
    assert all(node.name.startswith("same-") for node in nodes)
    ports = [node.port for node in nodes] + [node.port + DIST_OFFSET for node in nodes]
    assert len(set(ports)) == 40
    assert not {5672, 25672} & set(ports)  # never the system broker's


def _running_nodes(cluster: ExtraCluster) -> set[str]:
    status = cluster.nodes[0].ctl("cluster_status", "--formatter", "json").stdout
    return set(json.loads(status)["running_nodes"])


@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_two_clusters_run_side_by_side() -> None:
    """Two 3-node clusters of one label, started at the same time, as two suites on one
    machine would: six nodes, two clusters, no node in the other's cluster."""
    first, second = ExtraCluster("twin"), ExtraCluster("twin")
    assert first.name != second.name
    first_ports = {node.port for node in first.nodes}
    assert not first_ports & {node.port for node in second.nodes}
    try:
        await asyncio.gather(
            asyncio.to_thread(first.__enter__), asyncio.to_thread(second.__enter__)
        )
        for cluster in (first, second):
            assert _running_nodes(cluster) == {node.nodename for node in cluster.nodes}
            assert cluster.amqp_url.split(",") == cluster.urls
            for node in cluster.nodes:
                assert await _round_trip(node.url, f"probe-{node.port}", node.name.encode()) == (
                    node.name.encode()
                )
        # A queue declared on one cluster is on its nodes only.
        await _round_trip(first.urls[0], "only-here", b"x")
        listed = second.nodes[0].ctl("list_queues", "name", "--quiet").stdout.split()
        assert "only-here" not in listed
        assert "only-here" in first.nodes[1].ctl("list_queues", "name", "--quiet").stdout.split()
    finally:
        await asyncio.gather(
            asyncio.to_thread(first.__exit__, None, None, None),
            asyncio.to_thread(second.__exit__, None, None, None),
        )
    for node in first.nodes + second.nodes:
        assert not node.state_dir.exists()
