"""Broker restarts under load: every job answered, none lost, duplicates counted.

The worker is at-least-once: a job whose reply was confirmed but whose acknowledgement
died with the connection is delivered again and answered twice. These tests restart a
RabbitMQ node of their own (tests/rabbit_nodes.py) in the middle of a run of thousands
of jobs, through a real `prompt-worker serve`, in three ways: the broker application
(`rabbitmqctl stop_app` / `start_app`), the whole node (stop, start), and a crash (the
node's VM killed with SIGKILL, then started). The queues are durable quorum queues, so
the jobs outlive the node. A producer with publisher confirms publishes every job,
publishing again those the broker did not confirm, and the test checks that every job
id has a reply; how many came twice is printed for docs/BROKERS.md.

A broker that closes the connection while the worker is still declaring its topology
at start-up is tested against the shared broker, through a proxy that answers the
first `queue.declare` with the `connection.close` a broker shutting down sends.
"""

import asyncio
import contextlib
import itertools
import signal
import struct
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aio_pika
import orjson
import pytest
from aio_pika.abc import AbstractIncomingMessage
from pamqp import commands
from pamqp.frame import marshal

from tests.integration.helpers import (
    AMQP_URL,
    BROKER_PORT,
    StartWorker,
    TcpProxy,
    a_job,
    queue_depth,
    wait_for,
)
from tests.rabbit_nodes import ExtraNode
from worker.transport.link import topology
from worker.transport.link.topology import Topology

pytestmark = pytest.mark.broker

# -- a broker that hangs up while the worker declares its topology ------------------

PROTOCOL_HEADER = 8
FRAME_HEADER = struct.Struct(">BHI")
METHOD_FRAME = 1
QUEUE_DECLARE = (50, 10)
CONNECTION_CLOSE_OK = (10, 51)


class HangUpAtDeclare(TcpProxy):
    """A TCP forwarder to the broker that answers the first `queue.declare` it sees
    with `connection.close(code)`, as a broker does that shuts down (320
    CONNECTION_FORCED) or fails a queue while starting (541 INTERNAL_ERROR); every
    later connection is forwarded untouched."""

    def __init__(self, code: int, text: str, target_port: int = BROKER_PORT) -> None:
        super().__init__(target_port)
        self.code, self.text = code, text
        self.hung_up = 0

    async def _upstream(
        self,
        client_r: asyncio.StreamReader,
        client_w: asyncio.StreamWriter,
        broker_w: asyncio.StreamWriter,
    ) -> None:
        """Client to broker, frame by frame on the first connection."""
        if self.hung_up:
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
        # The archive off: its connection's declaration would be hung up on as well.
        worker = start_worker(
            amqp_url=proxy.url + "?reconnect_interval=0.2",
            env={"PROMPT_WORKER_ARCHIVE_STREAM": ""},
        )
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
        assert not [e for e in events if "logger" in e], "client library lines got through"
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


# -- restarts under load ---------------------------------------------------------------

JOBS = 20_000
# The restart comes once this many jobs are answered: well into the run, far from its end,
# and seconds after the queues were declared (a node killed sooner once left its new quorum
# queue without a leader for minutes: docs/BROKERS.md, "Broker restarts: at least once, never lost").
RESTART_AFTER = 3000
# Publishes awaiting their confirm at once.
PUBLISHING = 200
# Jobs published and not yet answered, at most.
AHEAD = 2000
RUN_TIMEOUT = 420.0


@dataclass
class Replies:
    """Every reply read from the reply queue, by job and by request message.

    Each publish of a job carries a correlation id of its own (job id and attempt),
    which the worker copies into the reply, and the worker gives each reply it
    publishes a message id of its own. So a reply the test's consumer was handed twice
    (its ack lost in the restart) counts once; two replies to one request message are
    the worker's duplicate; replies to two publishes of one job are the producer's.
    """

    by_request: dict[str, set[str]] = field(default_factory=dict)
    by_job: dict[str, set[str]] = field(default_factory=dict)
    statuses: Counter[str] = field(default_factory=Counter)

    def add(self, message: AbstractIncomingMessage) -> None:
        reply = orjson.loads(message.body)
        request = message.correlation_id or ""
        self.by_request.setdefault(request, set()).add(message.message_id or "")
        self.by_job.setdefault(reply["job_id"], set()).add(request)
        self.statuses[reply["status"]] += 1

    @property
    def answered(self) -> int:
        return len(self.by_job)

    @property
    def duplicates(self) -> int:
        """Requests the worker answered more than once (each extra reply counts)."""
        return sum(len(ids) - 1 for ids in self.by_request.values())

    @property
    def republished(self) -> int:
        """Extra publishes of a job by the producer that reached the worker."""
        return sum(len(requests) - 1 for requests in self.by_job.values())


async def read_replies(url: str, queue_name: str, replies: Replies) -> aio_pika.RobustConnection:
    """Consume the reply queue into `replies`, through the restart (robust connection)."""
    connection = await aio_pika.connect_robust(url + "?reconnect_interval=0.5")
    channel = await connection.channel()
    await channel.set_qos(prefetch_count=500)
    queue = await channel.declare_queue(
        queue_name, durable=True, arguments=topology.reply_queue_arguments()
    )

    async def on_reply(message: AbstractIncomingMessage) -> None:
        replies.add(message)
        with contextlib.suppress(Exception):  # not acked: it comes again, and counts once
            await message.ack()

    await queue.consume(on_reply)
    assert isinstance(connection, aio_pika.RobustConnection)
    return connection


@dataclass
class Producer:
    """Publishes every job with publisher confirms, and publishes again any job whose
    publish failed or was not confirmed (the broker went away meanwhile).

    It keeps at most `AHEAD` jobs ahead of the replies, as a live system's producers
    would, so the run lasts as long as the worker takes and the restart falls in its
    middle, with jobs queued, in flight and still to be published.
    """

    url: str
    queue_name: str
    answered: Callable[[], int]
    again: set[str] = field(default_factory=set)  # jobs published more than once

    async def run(self, ids: list[str]) -> None:
        connection = await aio_pika.connect_robust(self.url + "?reconnect_interval=0.5")
        async with connection:
            channel = await connection.channel(publisher_confirms=True)
            slots = asyncio.Semaphore(PUBLISHING)

            async def publish(job_id: str) -> None:
                body = orjson.dumps(a_job(job_id))
                try:
                    for attempt in itertools.count():
                        try:
                            await channel.default_exchange.publish(
                                aio_pika.Message(
                                    body,
                                    delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                                    correlation_id=f"{job_id}/{attempt}",
                                ),
                                routing_key=self.queue_name,
                                timeout=10,
                            )
                            return
                        except asyncio.CancelledError:
                            raise
                        except Exception:
                            self.again.add(job_id)
                            await asyncio.sleep(0.5)
                finally:
                    slots.release()

            publishing = []
            for index, job_id in enumerate(ids):

                async def caught_up(index: int = index) -> bool:
                    return index - self.answered() <= AHEAD

                await wait_for(caught_up, RUN_TIMEOUT, "the replies to catch up")
                await slots.acquire()
                publishing.append(asyncio.create_task(publish(job_id)))
            await asyncio.gather(*publishing)


async def restart_under_load(
    start_worker: StartWorker,
    topo: Topology,
    label: str,
    restart: tuple[Callable[[ExtraNode], None], Callable[[ExtraNode], None]],
) -> None:
    with ExtraNode("restarts", fresh=True) as node:
        node.fresh = False  # a restart keeps the node's queues and their jobs
        worker = start_worker(amqp_url=node.url + "?reconnect_interval=0.2")
        await worker.wait_ready()
        replies = Replies()
        reader = await read_replies(node.url, topo.reply_queue, replies)
        ids = [f"{label}-{i}" for i in range(JOBS)]
        producer = Producer(node.url, topo.request_queue, lambda: replies.answered)
        producing = asyncio.create_task(producer.run(ids))
        try:

            async def some_answered() -> bool:
                return replies.answered >= RESTART_AFTER

            await wait_for(some_answered, RUN_TIMEOUT, f"{RESTART_AFTER} replies")
            stop, start = restart
            await asyncio.to_thread(stop, node)
            # Counted once the broker is down: every job answered later is one the
            # restart could have lost.
            at_stop = replies.answered
            await asyncio.sleep(1)  # the worker notices and retries against a closed port
            await asyncio.to_thread(start, node)

            async def all_answered() -> bool:
                assert not producing.done() or producing.exception() is None
                return replies.answered == JOBS

            await wait_for(all_answered, RUN_TIMEOUT, f"{JOBS} jobs answered", interval=0.5)
            await producing
        finally:
            producing.cancel()
            await asyncio.gather(producing, return_exceptions=True)
            await asyncio.wait_for(reader.close(), timeout=10)

        assert JOBS - at_stop >= AHEAD, "the run was nearly over before the restart"
        assert sorted(replies.by_job) == sorted(ids)
        assert set(replies.statuses) == {"ok"}
        events = worker.log_events()
        names = [e["event"] for e in events]
        assert "broker_link_down" in names
        assert names.index("broker_link_down") < names.index("broker_reconnected")
        assert not [e for e in events if e.get("level") == "error" and "logger" not in e]
        worker.signal(signal.SIGTERM)
        assert await worker.wait_exit() == 0
        # Nothing left behind: no job waiting, none dead-lettered.
        connection = await aio_pika.connect(node.url)
        async with connection:
            channel = await connection.channel()
            assert await queue_depth(channel, topo.request_queue) == 0
            assert await queue_depth(channel, topo.dead_letter_queue) == 0
        # The figures docs/BROKERS.md quotes ("Broker restarts: at least once, never lost"), shown with -s.
        print(
            f"\n{label}: {JOBS} jobs, {at_stop} answered when the broker was down; "
            f"{replies.answered} answered, {replies.duplicates} answered twice by the worker; "
            f"the producer published {len(producer.again)} jobs again, "
            f"{replies.republished} of those publishes reached the worker too"
        )


def start_app(node: ExtraNode) -> None:
    node.start_app()


def start_node(node: ExtraNode) -> None:
    node.start()


# How the broker goes down, and how it comes back.
RESTARTS = [
    pytest.param("stop-app", (ExtraNode.stop_app, start_app), id="application"),
    pytest.param("node-restart", (ExtraNode.stop, start_node), id="node"),
    pytest.param("kill-9", (ExtraNode.kill, start_node), id="kill-9"),
]


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize(("label", "restart"), RESTARTS)
async def test_a_broker_restarted_under_load_loses_no_job(
    start_worker: StartWorker,
    topo: Topology,
    label: str,
    restart: tuple[Callable[[ExtraNode], None], Callable[[ExtraNode], None]],
) -> None:
    await restart_under_load(start_worker, topo, label, restart)
