"""Replies the broker refused: backpressure, never a dead letter.

A job whose render succeeded is answered, or waits. When the broker refuses its reply
with a negative confirm (a reply queue over its limit with `reject-publish`, a quorum
queue without a leader yet after a node died, ...) the fault is the broker's, not the
job's, so the job is neither requeued nor dead-lettered: the worker holds it, still
unacknowledged on its own channel, and publishes the same reply again until the broker
confirms it, then acknowledges the job. Meanwhile:

* new deliveries wait at the door (`admit`), unrendered, as during a resource alarm:
  the worker takes no more work than it already holds;
* the reply goes out on a fresh channel of the worker's connection (the channel that
  was refused may be what is wrong), and after `FRESH_CHANNEL_TRIES` refusals there on
  a connection of its own to the next node of the cluster (a node that lost a queue's
  leader can keep refusing while the others accept); the pauses grow
  (`worker.transport.retry`);
* after `NOT_READY_AFTER` seconds the worker reports not ready (`"replies_accepted":
  false`), with the reason logged;
* the first confirmed reply opens the door again. The channel that got it confirmed is
  kept for the next refusal, so a worker whose own connection keeps being refused (a
  node that lost a queue's leader) answers through the other one at once, without the
  pauses, and without dropping the jobs it holds on its own connection;
* a held reply outlives its delivery (`HeldReply`). Should the broker take the job back
  meanwhile (its channel closed: a consumer timeout, a channel error), the reply goes on
  being published, and the job's redelivery claims it (`claim`) instead of being
  rendered again: it is acknowledged once that reply is confirmed. Without this, the
  redeliveries would wait at a door nothing opens any more, each return counted by the
  broker towards the delivery limit until it dead-letters a job that rendered.

A reply the broker returns as unroutable, a reply too large for the broker, and jobs
that are wrong in themselves keep their own outcomes (`worker.transport.consumer.delivery`).
"""

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiormq.abc import AbstractChannel, AbstractConnection, DeliveredMessage
from aiormq.exceptions import (
    ChannelClosed,
    ChannelInvalidStateError,
    DeliveryError,
    PublishError,
)
from structlog.typing import FilteringBoundLogger

from worker.ops.metrics import Metrics
from worker.render.replies import RenderOutcome
from worker.transport.consumer.readiness import Readiness
from worker.transport.link.broker_failures import describe
from worker.transport.link.connection import BROKER_CALL_TIMEOUT
from worker.transport.retry import backoff

# Seconds of refused replies before the worker reports not ready.
NOT_READY_AFTER = 5.0
# Refusals on fresh channels of the worker's connection before a connection of its own.
FRESH_CHANNEL_TRIES = 2
# Longest pause between two publishes of a held reply: once the broker takes replies
# again, the held jobs are answered within it (and before a consumer timeout returns
# them once more).
REPUBLISH_PAUSE_CAP = 2.0
# Held replies whose delivery was lost, kept for the job's redelivery to claim: at most
# this many, each for at most this long after its reply was confirmed.
ORPHANS_KEPT = 10_000
ORPHAN_KEPT_FOR = 600.0

Send = Callable[[AbstractChannel], Awaitable[None]]


class ReplyChannels:
    """Where a refused reply is published again: a fresh channel of the worker's
    connection, or of a connection of its own to another node.

    `main()` gives the worker's connection (None while it is down); `side()` opens a
    connection to the next node (one attempt; raises when it fails).
    """

    def __init__(
        self,
        main: Callable[[], AbstractConnection | None],
        side: Callable[[], Awaitable[AbstractConnection]],
    ) -> None:
        self._main = main
        self._side = side
        self.side_connection: AbstractConnection | None = None
        self.used_side = False
        self._channel: AbstractChannel | None = None

    async def channel(self, refusals: int) -> AbstractChannel:
        if self._channel is not None and not self._channel.is_closed:
            return self._channel
        connection = self._main()
        if refusals >= FRESH_CHANNEL_TRIES or connection is None or connection.is_closed:
            if self.side_connection is None or self.side_connection.is_closed:
                self.side_connection = await self._side()
            connection = self.side_connection
            self.used_side = True
        self._channel = await connection.channel(
            publisher_confirms=True, on_return_raises=True, timeout=BROKER_CALL_TIMEOUT
        )
        return self._channel

    async def discard(self) -> None:
        """The channel in use failed or was refused: the next try opens another."""
        channel, self._channel = self._channel, None
        if channel is not None and not channel.is_closed:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(channel.close(), timeout=1)

    async def close(self) -> None:
        await self.discard()
        side, self.side_connection = self.side_connection, None
        if side is not None and not side.is_closed:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(side.close(), timeout=5)


def held_key(message: DeliveredMessage) -> bytes:
    """What a redelivery of the same job is recognised by: its ids, its reply queue and
    its bytes (a digest of them)."""
    properties = message.header.properties
    digest = hashlib.blake2b(digest_size=16)
    for part in (properties.message_id, properties.correlation_id, properties.reply_to):
        digest.update((part or "").encode() + b"\0")
    digest.update(message.body)
    return digest.digest()


@dataclass(slots=True)
class HeldReply:
    """A refused reply and the task publishing it again until it is confirmed."""

    outcome: RenderOutcome
    republishing: "asyncio.Task[None]"
    orphaned_at: float | None = None  # time.monotonic() when its delivery was lost


class ReplyBackpressure:
    """Holds refused replies and publishes them again; the door new deliveries wait at."""

    def __init__(
        self,
        readiness: Readiness,
        metrics: Metrics,
        log: FilteringBoundLogger,
        channels: ReplyChannels,
    ) -> None:
        self.readiness = readiness
        self.metrics = metrics
        self.log = log
        self.channels = channels
        self._open = asyncio.Event()
        self._open.set()
        self._one_at_a_time = asyncio.Lock()
        self.held = 0
        self.reason: str | None = None
        self._since = 0.0
        self._unready: asyncio.TimerHandle | None = None
        self._republishing: set[asyncio.Task[None]] = set()
        self.orphans: dict[bytes, HeldReply] = {}

    @property
    def engaged(self) -> bool:
        return not self._open.is_set()

    async def admit(self) -> None:
        """Return once replies reach the broker again (at once, usually)."""
        await self._open.wait()

    def hold(self, error: BaseException, outcome: RenderOutcome, send: Send) -> HeldReply:
        """The broker refused a reply (`error`): publish it again with `send(channel)`,
        in a task of its own, until it is confirmed. The task raises `PublishError`
        should the broker return the reply as unroutable (the caller's outcome for that)."""
        self._hold(error)
        task = asyncio.ensure_future(self._republish(send))
        self._republishing.add(task)
        task.add_done_callback(self._republished)
        return HeldReply(outcome, task)

    async def confirmed(self, held: HeldReply, job: DeliveredMessage) -> None:
        """Until `held` is confirmed (raising as its task does). Should the delivery of
        `job` be lost meanwhile (its channel closed: the broker takes the job back), the
        reply goes on being published, kept for the job's redelivery."""
        try:
            await asyncio.shield(held.republishing)
        except asyncio.CancelledError:
            if not held.republishing.done():
                # Only now the job's digest: most held replies never lose their delivery.
                self.orphan(held_key(job), held)
            raise

    def orphan(self, key: bytes, held: HeldReply) -> None:
        """The delivery `held` answers was lost: keep it for the redelivery to `claim`."""
        self._prune()
        held.orphaned_at = time.monotonic()
        self.orphans[key] = held

    def claim(self, key: bytes) -> HeldReply | None:
        """The held reply of a lost delivery of the same job, if there is one."""
        return self.orphans.pop(key, None)

    def _prune(self) -> None:
        now = time.monotonic()
        for key, held in list(self.orphans.items()):
            old = held.orphaned_at is not None and now - held.orphaned_at > ORPHAN_KEPT_FOR
            if held.republishing.done() and (old or len(self.orphans) >= ORPHANS_KEPT):
                del self.orphans[key]

    async def _republish(self, send: Send) -> None:
        async with self._one_at_a_time:
            refusals = 0
            while True:
                if refusals:
                    await asyncio.sleep(backoff(refusals - 1, cap=REPUBLISH_PAUSE_CAP))
                try:
                    await send(await self.channels.channel(refusals))
                except asyncio.CancelledError:
                    raise
                except PublishError:
                    # Returned as unroutable: the broker takes replies again (the caller's
                    # queue is gone), so the door opens as for a confirmed one.
                    self._confirmed()
                    raise
                except Exception as exc:
                    refusals += 1
                    self.metrics.reply_refusals.labels(cause=_cause(exc)).inc()
                    self.log.warning(
                        "reply_republish_failed",
                        attempt=refusals,
                        error=describe(exc),
                        own_connection=self.channels.used_side,
                    )
                    await self.channels.discard()
                    continue
                break
        self._confirmed()

    def _republished(self, task: "asyncio.Task[None]") -> None:
        self._republishing.discard(task)
        self.held -= 1
        self.metrics.replies_held.set(self.held)
        if not task.cancelled():
            task.exception()  # retrieved: the delivery or its redelivery acts on it

    async def close(self) -> None:
        """At shutdown: the jobs of replies still refused stay unacknowledged, for the
        broker to hand to another worker."""
        for task in list(self._republishing):
            task.cancel()
        await asyncio.gather(*self._republishing, return_exceptions=True)
        self.orphans.clear()
        await self.channels.close()

    def _hold(self, error: BaseException) -> None:
        self.held += 1
        self.metrics.replies_held.set(self.held)
        self.metrics.reply_refusals.labels(cause=_cause(error)).inc()
        if self.engaged:
            return
        self.reason = _reason(error)
        self._since = time.monotonic()
        self._open.clear()
        self.log.warning("reply_backpressure", reason=self.reason, held=self.held)
        self._unready = asyncio.get_running_loop().call_later(NOT_READY_AFTER, self._not_ready)

    def _not_ready(self) -> None:
        if not self.engaged:
            return
        self.readiness.replies_accepted = False
        self.readiness.update()
        self.log.warning(
            "not_ready", reason=f"replies refused by the broker: {self.reason}", held=self.held
        )

    def _confirmed(self) -> None:
        if not self.engaged:
            return
        if self._unready is not None:
            self._unready.cancel()
        self.log.info(
            "reply_backpressure_cleared",
            reason=self.reason,
            held=self.held,
            refused_s=round(time.monotonic() - self._since, 1),
        )
        self.reason = None
        self._open.set()
        self.readiness.replies_accepted = True
        self.readiness.update()


def _reason(error: BaseException) -> str:
    if isinstance(error, DeliveryError):
        return "the broker refused the reply (nack)"
    return describe(error)


def _cause(error: BaseException) -> str:
    """`nack` (a negative confirm), `channel` or `connection` (lost while publishing)."""
    if isinstance(error, DeliveryError):
        return "nack"
    if isinstance(error, ChannelClosed | ChannelInvalidStateError):
        return "channel"
    return "connection"
