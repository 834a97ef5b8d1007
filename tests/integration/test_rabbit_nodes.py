"""The extra-node tool that broker-breaking tests stand on actually gives a broker."""

import aio_pika
import pytest

from tests.rabbit_nodes import ExtraNode

pytestmark = [pytest.mark.slow]


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


async def test_extra_node_serves_amqp_survives_an_app_restart_and_stops() -> None:
    with ExtraNode("nodetool", 5679) as node:
        assert await _round_trip(node.url, "probe", b"one") == b"one"
        # The durable queue outlives stop_app/start_app: the node's state is its own.
        node.stop_app()
        node.start_app()
        queues = node.ctl("list_queues", "name", "--quiet").stdout.split()
        assert "probe" in queues
        assert await _round_trip(node.url, "probe", b"two") == b"two"
    with pytest.raises(OSError):
        await aio_pika.connect(node.url, timeout=3)
