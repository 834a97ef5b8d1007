"""Broker restarts under load: every job answered, none lost, duplicates counted.

The worker is at-least-once: a job whose reply was confirmed but whose acknowledgement
died with the connection is delivered again and answered twice. These tests restart a
RabbitMQ node of their own (tests/rabbit_nodes.py) in the middle of a run of thousands
of jobs, through a real `prompt-worker serve`, in three ways: the broker application
(`rabbitmqctl stop_app` / `start_app`), the whole node (stop, start), and a crash (the
node's VM killed with SIGKILL, then started). The queues are durable quorum queues, so
the jobs outlive the node. A producer with publisher confirms publishes every job,
publishing again those the broker did not confirm, and the test checks that every job
id has a reply; how many came twice is printed for docs/OPERATIONS.md.

A broker that closes the connection while the worker is still declaring its topology
at start-up is tested against the shared broker, through a proxy that answers the
first `queue.declare` with the `connection.close` a broker shutting down sends.
"""

import asyncio
import contextlib
import struct
import time
from typing import Any

import aio_pika
import orjson
import pytest
from aio_pika.abc import AbstractIncomingMessage
from pamqp import commands
from pamqp.frame import marshal

from tests.integration.helpers import (
    AMQP_URL,
    StartWorker,
    a_job,
    free_port,
)
from worker.transport.topology import Topology

pytestmark = pytest.mark.broker

# -- a broker that hangs up while the worker declares its topology ------------------

PROTOCOL_HEADER = 8
FRAME_HEADER = struct.Struct(">BHI")
METHOD_FRAME = 1
QUEUE_DECLARE = (50, 10)
CONNECTION_CLOSE_OK = (10, 51)


class HangUpAtDeclare:
    """A TCP forwarder to the broker that answers the first `queue.declare` it sees
    with `connection.close(code)`, as a broker does that shuts down (320
    CONNECTION_FORCED) or fails a queue while starting (541 INTERNAL_ERROR); every
    later connection is forwarded untouched."""

    def __init__(self, code: int, text: str, target_port: int = 5672) -> None:
        self.code, self.text = code, text
        self.target_port = target_port
        self.port = free_port()
        self.hung_up = 0
        self._server: asyncio.Server | None = None
        self._transports: set[asyncio.Transport] = set()

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for transport in list(self._transports):
            transport.abort()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        broker_r, broker_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        for writer in (client_w, broker_w):
            self._transports.add(writer.transport)  # type: ignore[arg-type]
        armed = self.hung_up == 0
        await asyncio.gather(
            self._upstream(client_r, client_w, broker_w, armed),
            self._pipe(broker_r, client_w),
            return_exceptions=True,
        )
        for writer in (client_w, broker_w):
            writer.transport.abort()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        finally:
            writer.transport.abort()

    async def _upstream(
        self,
        client_r: asyncio.StreamReader,
        client_w: asyncio.StreamWriter,
        broker_w: asyncio.StreamWriter,
        armed: bool,
    ) -> None:
        """Client to broker, frame by frame while armed."""
        if not armed:
            await self._pipe(client_r, broker_w)
            return
        broker_w.write(await client_r.readexactly(PROTOCOL_HEADER))
        while True:
            header, rest, method = await self._frame(client_r)
            if method == QUEUE_DECLARE:
                break
            broker_w.write(header + rest)
            await broker_w.drain()
        self.hung_up += 1
        close = commands.Connection.Close(self.code, self.text, class_id=0, method_id=0)
        client_w.write(marshal(close, 0))
        await client_w.drain()
        # As the broker does: the socket closes on the client's close-ok, or soon anyway.
        with contextlib.suppress(TimeoutError, asyncio.IncompleteReadError):
            async with asyncio.timeout(1):
                while (await self._frame(client_r))[2] != CONNECTION_CLOSE_OK:
                    pass
        client_w.transport.abort()
        broker_w.transport.abort()

    @staticmethod
    async def _frame(reader: asyncio.StreamReader) -> tuple[bytes, bytes, tuple[int, int] | None]:
        """One frame: its header, the rest, and (class, method) if a method frame."""
        header = await reader.readexactly(FRAME_HEADER.size)
        kind, _, size = FRAME_HEADER.unpack(header)
        rest = await reader.readexactly(size + 1)
        method = struct.unpack(">HH", rest[:4]) if kind == METHOD_FRAME else None
        return header, rest, method


@pytest.mark.parametrize(
    ("code", "text"),
    [
        (320, "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'"),
        (541, "INTERNAL_ERROR"),
    ],
)
async def test_a_broker_hanging_up_while_the_topology_is_declared_is_a_lost_link(
    start_worker: StartWorker, topo: Topology, code: int, text: str
) -> None:
    proxy = HangUpAtDeclare(code, text)
    await proxy.start()
    try:
        worker = start_worker(amqp_url=proxy.url + "?reconnect_interval=0.2")
        await worker.wait_ready()
        assert proxy.hung_up == 1
        connection = await aio_pika.connect(AMQP_URL)
        async with connection:
            channel = await connection.channel()
            await channel.default_exchange.publish(
                aio_pika.Message(orjson.dumps(a_job("after-hang-up"))),
                routing_key=topo.request_queue,
            )
            replies = await channel.get_queue(topo.reply_queue, ensure=False)
            reply = await next_message(replies)
            assert orjson.loads(reply.body)["job_id"] == "after-hang-up"
        assert worker.process.poll() is None
        # No traceback, no exit: one line of the worker's own says what happened.
        events = [orjson.loads(line) for line in worker.logs().splitlines()]
        [down] = [e for e in events if e["event"] == "broker_link_down"]
        assert down["during"] == "start"
        assert down["level"] == "warning"
        assert down["error"] == f"the broker closed the connection: {text}"
        assert down["retry_in_s"] > 0
    finally:
        await proxy.stop()


async def next_message(queue: Any, within: float = 60) -> AbstractIncomingMessage:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        message = await queue.get(fail=False)
        if message is not None:
            await message.ack()
            return message  # type: ignore[no-any-return]
        await asyncio.sleep(0.05)
    raise AssertionError(f"no message in {within} s")
