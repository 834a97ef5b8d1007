"""The worker's topology declared through aio-pika, for the tests' and benchmarks'
clients and the aio-pika echo worker (`bench/echo_worker.py`): `serve` itself declares
it on aiormq's channel (`worker.transport.link.topology.declare_on`), and aio-pika is
not a dependency of the worker's run time."""

from dataclasses import dataclass

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractExchange, AbstractQueue

from worker.transport.link.topology import (
    Topology,
    dead_letter_queue_arguments,
    reply_queue_arguments,
)


@dataclass(frozen=True, slots=True)
class Declared:
    request_queue: AbstractQueue
    reply_queue: AbstractQueue
    dead_letter_exchange: AbstractExchange
    dead_letter_queue: AbstractQueue


async def declare_topology(channel: AbstractChannel, topology: Topology) -> Declared:
    """Declare every object of `topology` on `channel` (idempotent).

    The dead-letter side is declared first so no job can be dead-lettered into an
    exchange that does not exist yet.
    """
    dlx = await channel.declare_exchange(
        topology.dead_letter_exchange, aio_pika.ExchangeType.FANOUT, durable=True
    )
    dlq = await channel.declare_queue(
        topology.dead_letter_queue, durable=True, arguments=dead_letter_queue_arguments()
    )
    await dlq.bind(dlx, routing_key="")
    replies = await channel.declare_queue(
        topology.reply_queue, durable=True, arguments=reply_queue_arguments()
    )
    requests = await channel.declare_queue(
        topology.request_queue, durable=True, arguments=topology.request_arguments()
    )
    return Declared(requests, replies, dlx, dlq)
