"""The worker's RabbitMQ topology, in one place (CONTRACT.md §4).

The worker declares it idempotently on each channel it opens (`declare_on`, on aiormq's
channel: at start-up and after every reconnect); tests and benchmarks declare it through
aio-pika (`tests/aio_pika_topology.py`); `deploy/rabbitmq/definitions.json` describes the same objects for brokers
that are provisioned ahead of time, and `rabbitmq_definitions` renders them in that
format so the two can be compared by a test. The archive stream (SPEC §12) is declared by
the archive's recorder (`worker.archive.recorder`); the definitions hold it too, with
its default retention. RabbitMQ refuses (406
PRECONDITION_FAILED) to re-declare a queue with different arguments, so every argument
here is part of the deployment contract: change it only together with a migration.

Dead-lettering is `at-least-once`: the broker keeps a dead-lettered job in the source
queue until the dead-letter queue has confirmed it, so a job rejected as bad input is
never lost on its way to inspection. RabbitMQ 3.10 needs the `stream_queue` feature flag
for it (enabled on every 3.10 install that did not disable it) and `x-overflow:
reject-publish`; without them it silently falls back to at-most-once.
"""

from dataclasses import dataclass
from typing import Any

from aiormq.abc import AbstractChannel as LinkChannel

from worker.archive.recorder import ArchiveSettings
from worker.transport.link.connection import BROKER_CALL_TIMEOUT
from worker.transport.setting_flags import (
    DEFAULT_ARCHIVE_CONFIRM_TIMEOUT,
    DEFAULT_ARCHIVE_MAX_AGE,
    DEFAULT_ARCHIVE_MAX_BYTES,
    DEFAULT_ARCHIVE_STREAM,
)

DEFAULT_REQUEST_QUEUE = "build-prompt"
DEFAULT_DEAD_LETTER = "build-prompt.dead"
DEFAULT_REPLY_QUEUE = "build-prompt.replies"
DEFAULT_DELIVERY_LIMIT = 5
DEAD_LETTER_EXCHANGE_TYPE = "fanout"


def request_queue_arguments(
    dead_letter_exchange: str = DEFAULT_DEAD_LETTER,
    delivery_limit: int = DEFAULT_DELIVERY_LIMIT,
) -> dict[str, Any]:
    """Arguments of the request queue (durable quorum queue)."""
    return {
        "x-queue-type": "quorum",
        # A job that keeps killing or disconnecting its worker is dead-lettered after
        # this many deliveries instead of looping forever.
        "x-delivery-limit": delivery_limit,
        "x-dead-letter-exchange": dead_letter_exchange,
        "x-dead-letter-strategy": "at-least-once",
        # Required by at-least-once dead-lettering; a producer publishing to a full
        # queue gets a nack (an error it can act on) instead of a silent drop.
        "x-overflow": "reject-publish",
    }


def dead_letter_queue_arguments() -> dict[str, Any]:
    return {"x-queue-type": "quorum"}


def reply_queue_arguments() -> dict[str, Any]:
    return {"x-queue-type": "quorum"}


@dataclass(frozen=True, slots=True)
class Topology:
    request_queue: str = DEFAULT_REQUEST_QUEUE
    reply_queue: str = DEFAULT_REPLY_QUEUE
    # Name of both the dead-letter exchange and the queue bound to it.
    dead_letter: str = DEFAULT_DEAD_LETTER
    delivery_limit: int = DEFAULT_DELIVERY_LIMIT

    @property
    def dead_letter_exchange(self) -> str:
        return self.dead_letter

    @property
    def dead_letter_queue(self) -> str:
        return self.dead_letter

    def request_arguments(self) -> dict[str, Any]:
        return request_queue_arguments(self.dead_letter_exchange, self.delivery_limit)

    def queue_names(self) -> tuple[str, str, str]:
        return (self.request_queue, self.reply_queue, self.dead_letter_queue)


async def declare_on(channel: LinkChannel, topology: Topology) -> None:
    """`declare`, on an aiormq channel (the worker's link); each call bounded by
    `BROKER_CALL_TIMEOUT`."""
    await channel.exchange_declare(
        topology.dead_letter_exchange,
        exchange_type=DEAD_LETTER_EXCHANGE_TYPE,
        durable=True,
        timeout=BROKER_CALL_TIMEOUT,
    )
    await channel.queue_declare(
        topology.dead_letter_queue,
        durable=True,
        arguments=dead_letter_queue_arguments(),
        timeout=BROKER_CALL_TIMEOUT,
    )
    await channel.queue_bind(
        topology.dead_letter_queue, topology.dead_letter_exchange, timeout=BROKER_CALL_TIMEOUT
    )
    await declare_reply_queue(channel, topology)
    await declare_request_queue(channel, topology)


async def declare_reply_queue(channel: LinkChannel, topology: Topology) -> None:
    await channel.queue_declare(
        topology.reply_queue,
        durable=True,
        arguments=reply_queue_arguments(),
        timeout=BROKER_CALL_TIMEOUT,
    )


async def declare_request_queue(channel: LinkChannel, topology: Topology) -> None:
    await channel.queue_declare(
        topology.request_queue,
        durable=True,
        arguments=topology.request_arguments(),
        timeout=BROKER_CALL_TIMEOUT,
    )


def default_archive() -> ArchiveSettings:
    """The archive stream `serve` declares by default."""
    return ArchiveSettings(
        DEFAULT_ARCHIVE_STREAM,
        DEFAULT_ARCHIVE_MAX_AGE,
        DEFAULT_ARCHIVE_MAX_BYTES,
        DEFAULT_ARCHIVE_CONFIRM_TIMEOUT,
    )


def rabbitmq_definitions(
    topology: Topology | None = None,
    vhost: str = "/",
    archive: ArchiveSettings | None = None,
) -> dict[str, Any]:
    """The topology in RabbitMQ's definitions format (the `queues`, `exchanges` and
    `bindings` sections of `rabbitmqctl export_definitions`), with the archive stream
    (`default_archive()` unless given)."""
    topology = topology or Topology()
    archive = archive or default_archive()

    def queue(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return {
            "name": name,
            "vhost": vhost,
            "durable": True,
            "auto_delete": False,
            "arguments": arguments,
        }

    return {
        "queues": [
            queue(topology.request_queue, topology.request_arguments()),
            queue(topology.dead_letter_queue, dead_letter_queue_arguments()),
            queue(topology.reply_queue, reply_queue_arguments()),
            queue(archive.stream, archive.arguments()),
        ],
        "exchanges": [
            {
                "name": topology.dead_letter_exchange,
                "vhost": vhost,
                "type": DEAD_LETTER_EXCHANGE_TYPE,
                "durable": True,
                "auto_delete": False,
                "internal": False,
                "arguments": {},
            }
        ],
        "bindings": [
            {
                "source": topology.dead_letter_exchange,
                "vhost": vhost,
                "destination": topology.dead_letter_queue,
                "destination_type": "queue",
                "routing_key": "",
                "arguments": {},
            }
        ],
    }
