"""Moving dead-lettered jobs back to the request queue (`prompt-worker replay-dead`).

A job lands in the dead-letter queue when the worker answered it with an error reply
(bad input) or when it exhausted its delivery limit. Once the producer or the worker is
fixed, the jobs are replayed: each one is published to the request queue with publisher
confirms and only then acknowledged in the dead-letter queue. A failure between the two
leaves the dead copy where it was, so a job can be replayed twice (consumers of replies
already deduplicate, CONTRACT.md §4) but never lost.

Messages that are only looked at (a dry run, or another kind than the one asked for)
stay unacknowledged until the end and are then handed back to the dead-letter queue in
one `nack`; a dropped connection hands them back too.

The connection is made as the producers' link makes it (`transport/producers/rpc.py`): the
addresses of a cluster in order, the first that answers, refused credentials named.
A run is short and leaves nothing half done, so a lost connection ends it rather than
being followed by a reconnect: run it again.
"""

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import orjson
from aiormq.abc import AbstractChannel, AbstractConnection, DeliveredMessage
from aiormq.exceptions import ChannelNotFoundEntity, DeliveryError, PublishError
from pamqp.commands import Basic, Queue

from schemas.job import KIND_ALIASES
from worker.transport.link.addresses import SEPARATOR, first_address
from worker.transport.link.tls import TlsFiles, connect_kwargs
from worker.transport.producers.rpc import connect_any

if TYPE_CHECKING:
    # Only with tracing on is OpenTelemetry imported (worker.ops.tracing).
    from worker.ops.otel import JobTracing

# Headers RabbitMQ writes when it dead-letters a message. They describe the past death;
# a replayed job that dies again gets fresh ones from the broker.
DEATH_HEADERS = frozenset(
    {
        "x-death",
        "x-first-death-reason",
        "x-first-death-queue",
        "x-first-death-exchange",
        "x-last-death-reason",
        "x-last-death-queue",
        "x-last-death-exchange",
    }
)
# Added to every replayed job, so a job that keeps coming back is easy to spot.
REPLAY_COUNT_HEADER = "x-replay-count"

Action = Literal["listed", "replayed", "skipped"]


class ReplayError(Exception):
    """The replay cannot start (a queue is missing); nothing was moved."""


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """What an operator needs to triage a dead letter, without its payload text."""

    job_id: str | None
    kind: str | None
    size: int
    # From the most recent x-death entry: why (rejected, delivery_limit, ...) and where.
    reason: str | None
    queue: str | None
    deaths: int
    replays: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class ReplayResult:
    examined: int = 0
    matched: int = 0
    replayed: int = 0
    skipped: int = 0
    # Set when a publish to the request queue failed; the run stopped there.
    error: str | None = None
    letters: list[tuple[Action, DeadLetter]] = field(default_factory=list)


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def describe(body: bytes, headers: Mapping[str, Any] | None) -> DeadLetter:
    """Job id, kind and size of a dead letter, and why it died (never raises)."""
    job_id = kind = None
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        data = None
    if isinstance(data, dict):
        job_id = _text(data.get("job_id"))
        kind = _text(data.get("kind"))
    headers = headers or {}
    reason = queue = None
    deaths = 0
    x_death = headers.get("x-death")
    if isinstance(x_death, list) and x_death and isinstance(x_death[0], Mapping):
        latest = x_death[0]  # RabbitMQ keeps the most recent death first
        reason, queue = _text(latest.get("reason")), _text(latest.get("queue"))
        count = latest.get("count")
        deaths = count if isinstance(count, int) else 0
    reason = reason or _text(headers.get("x-last-death-reason"))
    queue = queue or _text(headers.get("x-last-death-queue"))
    replays = headers.get(REPLAY_COUNT_HEADER)
    return DeadLetter(
        job_id=job_id,
        kind=kind,
        size=len(body),
        reason=reason,
        queue=queue,
        deaths=deaths,
        replays=replays if isinstance(replays, int) else 0,
    )


def canonical_kind(kind: str | None) -> str | None:
    """The kind with TARSy spellings resolved, so a filter matches either spelling."""
    if kind is None:
        return None
    alias = KIND_ALIASES.get(kind)
    return alias.value if alias is not None else kind


def replay_properties(dead: Basic.Properties, letter: DeadLetter) -> Basic.Properties:
    """The job's properties as it was first published: same RPC properties, no death
    headers, persistent.

    `user_id` and `expiration` are left out on purpose: the broker refuses a user_id
    other than the replaying connection's, and an expiration would only make the job
    die again.
    """
    headers = {k: v for k, v in (dead.headers or {}).items() if k not in DEATH_HEADERS}
    headers[REPLAY_COUNT_HEADER] = letter.replays + 1
    return Basic.Properties(
        headers=headers,
        content_type=dead.content_type,
        content_encoding=dead.content_encoding,
        correlation_id=dead.correlation_id,
        reply_to=dead.reply_to,
        message_id=dead.message_id,
        timestamp=dead.timestamp,
        message_type=dead.message_type,
        app_id=dead.app_id,
        priority=dead.priority,
        delivery_mode=2,  # persistent
    )


async def replay_dead(
    amqp_url: str,
    dead_letter_queue: str,
    request_queue: str,
    *,
    dry_run: bool = False,
    limit: int | None = None,
    kind: str | None = None,
    on_letter: Callable[[Action, DeadLetter], None] | None = None,
    tls: TlsFiles | None = None,
    tracing: "JobTracing | None" = None,
) -> ReplayResult:
    """List (dry run) or replay up to `limit` dead letters, optionally of one `kind`.

    Only the messages present when the run starts are examined: a replayed job that is
    dead-lettered again during the run is not picked up a second time. With `tracing`,
    each replay is a send span continuing the job's own trace (its traceparent).
    """
    result = ReplayResult()
    wanted = canonical_kind(kind)
    budget = math.inf if limit is None else limit
    kwargs = connect_kwargs(first_address(amqp_url), tls)
    # A cluster's nodes, comma-separated: the first that answers.
    _, connection = await connect_any(amqp_url.split(SEPARATOR), kwargs)
    try:
        # Passive declarations: replay never creates or re-declares a queue, so it
        # cannot clash with the arguments the worker declared them with.
        dead_queue = await _existing_queue(connection, dead_letter_queue)
        await _existing_queue(connection, request_queue)
        present = dead_queue.message_count or 0

        channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
        held: int | None = None  # delivery tag of the latest delivery left unacked
        try:
            while result.examined < present and result.matched < budget:
                got = await _get(channel, dead_letter_queue)
                if got is None:
                    break
                tag, dead = got
                properties = dead.header.properties
                result.examined += 1
                letter = describe(dead.body, properties.headers)
                action: Action
                if wanted is not None and canonical_kind(letter.kind) != wanted:
                    result.skipped += 1
                    held, action = tag, "skipped"
                elif dry_run:
                    result.matched += 1
                    held, action = tag, "listed"
                else:
                    result.matched += 1
                    replayed = replay_properties(properties, letter)
                    sent = None
                    if tracing is not None:
                        sent = tracing.send(request_queue, replayed.headers)
                        replayed.headers = {**(replayed.headers or {}), **sent.headers}
                    try:
                        await channel.basic_publish(
                            dead.body,
                            routing_key=request_queue,
                            properties=replayed,
                            mandatory=True,
                        )
                    except (PublishError, DeliveryError) as exc:
                        if sent is not None:
                            sent.end(exc)
                        # Not confirmed: the dead copy stays, handed back below.
                        held = tag
                        result.error = f"job {letter.job_id!r} not replayed: {exc!r}"
                        break
                    if sent is not None:
                        sent.end()
                    await channel.basic_ack(tag)
                    result.replayed += 1
                    action = "replayed"
                result.letters.append((action, letter))
                if on_letter is not None:
                    on_letter(action, letter)
        finally:
            if held is not None and not channel.is_closed:
                # Every delivery up to this one that was not acked goes back, in one go.
                await channel.basic_nack(held, multiple=True, requeue=True)
    finally:
        await connection.close()
    return result


async def _get(channel: AbstractChannel, queue: str) -> tuple[int, DeliveredMessage] | None:
    """The delivery tag and the next message of `queue`, left unacknowledged; None when
    the queue is empty."""
    message = await channel.basic_get(queue, no_ack=False)
    delivery = message.delivery
    if not isinstance(delivery, Basic.GetOk) or delivery.delivery_tag is None:
        return None
    return delivery.delivery_tag, message


async def _existing_queue(connection: AbstractConnection, name: str) -> Queue.DeclareOk:
    # A failed passive declaration closes its channel, hence a channel of its own.
    channel = await connection.channel()
    try:
        declared = await channel.queue_declare(name, passive=True)
    except ChannelNotFoundEntity:
        raise ReplayError(f"queue {name!r} does not exist") from None
    await channel.close()
    return declared
