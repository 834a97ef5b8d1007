"""The queue consumer: deliveries in, replies out, at least once.

For each delivery: render the body (`Renderer.render` never raises), publish the reply
and wait for the broker's confirm, then settle the request — ack when the job rendered,
reject without requeue (so it is dead-lettered for inspection) when the reply is an
error. Nothing is settled before the reply is confirmed, so a worker or broker dying at
any point means the request is delivered again, never lost; replies can therefore be
duplicated and consumers of replies deduplicate by correlation id / job id.

When the reply cannot be delivered:

* `reply_to` names a queue that no longer exists (the RPC client timed out or exited):
  replies are published `mandatory` on a channel with `on_return_raises`, so the broker's
  return is seen; the job is settled as if answered (and the return logged), because
  no retry could ever reach that client and requeueing would loop to the delivery
  limit for nothing;
* the default reply queue is missing (deleted under a running worker): it is declared
  again and the reply published once more; if that fails too, the job is dead-lettered
  rather than answered into the void;
* the broker refuses the reply (nack, e.g. a full reply queue): the job is requeued
  after a pause that grows with its deliveries, and dead-lettered on the last one;
* the connection or channel fails: the job is left unacknowledged and comes back;
* the broker blocks the connection (a memory or disk alarm): no reply can get through,
  so new deliveries wait, untouched, until it unblocks (`worker.transport.flow`).

The job code (`worker.render.renderer`) never sees the transport; this module never looks
inside a job beyond the facts `RenderOutcome` hands it.

aio-pika owns the connection, the channel and the topology (reconnecting and declaring
again after a drop); the per-delivery path goes to aiormq's channel beneath it: deliveries
arrive as aiormq's `DeliveredMessage`, replies are published with `basic_publish` and
jobs settled with `basic_ack`/`basic_reject`/`basic_nack`, acknowledgements of one loop
turn batched (`worker.transport.acks`, one per channel; requeues and dead-letterings,
also those after a backoff, go through it, so no batched ack covers them). aio-pika's
message objects and the extra task it runs per delivery cost a large share of a job's
CPU for nothing the worker uses (docs/PERFORMANCE.md, "The transport's hot path"). The
consumer, which aio-pika then does not know about, is registered again each time the
channel reopens, and after a prefetch switch (`worker.transport.inflight`).
"""

import asyncio
import contextlib
import itertools
import os
import socket
import time
import uuid
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, cast

import aio_pika
import aiormq
import orjson
from aio_pika.abc import AbstractQueue, AbstractRobustChannel
from aio_pika.exceptions import CONNECTION_EXCEPTIONS
from aiormq.abc import DeliveredMessage
from aiormq.exceptions import (
    ChannelAccessRefused,
    ChannelPreconditionFailed,
    DeliveryError,
    PublishError,
)
from pamqp.commands import Basic
from yarl import URL

from schemas.codes import ErrorCode
from worker.ops.logs import format_exception, get_logger, payload_logging_enabled
from worker.ops.metrics import Metrics, kind_label
from worker.render.renderer import Renderer
from worker.render.replies import RenderOutcome, error_reply, peek_identity
from worker.transport import faults, tls, topology
from worker.transport.acks import AcksNotSent, BatchedAcks
from worker.transport.addresses import redact_addresses, split_addresses
from worker.transport.broker_failures import describe
from worker.transport.channel_watch import ChannelWatch
from worker.transport.connection import Backoff, BrokerConnection
from worker.transport.deadline import EventLoopSlice, SliceOverrun
from worker.transport.flow import BrokerFlow
from worker.transport.inflight import ByteBudget, PrefetchPolicy
from worker.transport.offload import RenderPool, RenderProcessDied, RenderTimedOut
from worker.transport.reply_limit import BROKER_DEFAULT_MAX_MESSAGE_BYTES, limit_from_refusal
from worker.transport.retry import backoff
from worker.transport.settings import Settings

if TYPE_CHECKING:
    # Only with tracing on is OpenTelemetry imported (worker.ops.tracing).
    from worker.ops.otel import JobTracing, ProcessSpan

# The most CPU time a render may take on the event loop before it moves to the helper
# (never longer than the render deadline itself): far above a typical job's render,
# short enough that the jobs waiting behind it hardly notice.
EVENT_LOOP_SLICE = 0.5
# A job whose render timed out is answered with its job id when the body is small
# enough to read again on the event loop at no real cost.
PEEK_IDENTITY_BYTES = 1024 * 1024
# After the default reply queue could not be declared again (e.g. no configure
# permission), unroutable replies are dead-lettered for this long without trying again:
# each failed declaration closes the channel, and with it every job in flight on it.
REDECLARE_PAUSE = 30.0
# RabbitMQ applies acknowledgements to a quorum queue asynchronously: a connection
# closed right after the last ones can have those messages returned to the queue and
# delivered again, so a SIGTERM drain answered its last jobs twice now and then
# (docs/PERFORMANCE.md, "Figures behind the code"). Pausing before the close lets them
# settle. Delivery stays at least once either way; a clean stop just no longer causes
# duplicates.
SETTLE_BEFORE_CLOSE = 0.3
# aio-pika's default is 5 s between reconnect attempts; a worker is worth more sooner.
DEFAULT_RECONNECT_INTERVAL = "2"
DEBUG_PAYLOAD_CHARS = 4096
# Failures while opening the channel and declaring the topology at start-up that a later
# attempt can get past (the link dropped, the broker restarting), and those it cannot
# (a user without configure permission stays without it).
START_RETRIED = CONNECTION_EXCEPTIONS
NOT_RETRIED = (ChannelAccessRefused,)


class TopologyError(Exception):
    """The broker holds a queue or exchange of ours with different arguments."""


def connection_url(amqp_url: str) -> URL:
    """The URL with the worker's connection defaults, unless the URL sets them itself.

    `fail_fast=false` lets the worker start before the broker (it keeps retrying, not
    ready, instead of exiting).
    """
    url = URL(amqp_url)
    defaults = {"fail_fast": "false", "reconnect_interval": DEFAULT_RECONNECT_INTERVAL}
    missing = {k: v for k, v in defaults.items() if k not in url.query}
    return url.update_query(missing) if missing else url


def connection_urls(amqp_url: str) -> list[URL]:
    """`connection_url` of each address of the setting (one, or a cluster's nodes)."""
    return [connection_url(address) for address in split_addresses(amqp_url)]


def delivery_count(message: DeliveredMessage) -> int:
    """How many times this job was handed out before without being settled.

    Quorum queues count it in `x-delivery-count`; elsewhere only the redelivered flag
    is known.
    """
    value = (message.header.properties.headers or {}).get("x-delivery-count")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    frame = message.delivery
    return 1 if isinstance(frame, Basic.Deliver) and frame.redelivered else 0


Settle = Literal["ack", "dead_letter", "requeue"]


@dataclass(frozen=True, slots=True)
class Delivery:
    """One delivery being handled: the message, and when and how often it came."""

    message: DeliveredMessage
    received: float  # time.perf_counter() on arrival
    attempt: int  # earlier deliveries of the same job (delivery_count)
    acks: BatchedAcks  # the settlement of the channel it came on
    tag: int  # its delivery tag on that channel
    span: "ProcessSpan | None" = None  # its trace's process span, with tracing on

    @property
    def reply_to(self) -> str | None:
        return self.message.header.properties.reply_to or None


@dataclass(frozen=True, slots=True)
class Retry:
    """The job goes back to the queue unanswered (or with its reply's fate unknown)."""

    reason: str  # for the log line
    settled: str = "requeued"  # what the log line calls it
    backoff: float = 0.0  # seconds to wait before handing it back


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with a delivery: the reply to publish and how to settle the job."""

    outcome: RenderOutcome | None  # None: nothing to publish
    settle: Settle
    offloaded: bool
    trace: str | None = None  # the stack trace of an internal error, for the log
    retry: Retry | None = None


class Worker:
    """Consumes one request queue until asked to stop."""

    def __init__(
        self,
        settings: Settings,
        renderer: Renderer,
        metrics: Metrics,
        render_pool: RenderPool | None = None,
        tracing: "JobTracing | None" = None,
    ) -> None:
        self.settings = settings
        self.tracing = tracing
        self.topology = settings.topology
        self.renderer = renderer
        self.metrics = metrics
        self.pool = render_pool or RenderPool(renderer.config, settings.max_message_bytes)
        self.slice = EventLoopSlice(min(EVENT_LOOP_SLICE, settings.render_timeout))
        self.budget = ByteBudget(settings.max_inflight_bytes)
        metrics.track_in_flight_bytes(lambda: self.budget.used, lambda: self.budget.peak)
        self.prefetch = PrefetchPolicy(settings.max_inflight_bytes, settings.prefetch)
        # Held while the consumer is started, replaced (new prefetch) or cancelled.
        self._consumer_lock = asyncio.Lock()
        self._prefetch_switch: asyncio.Task[None] | None = None
        self._faults = faults.enabled()
        # Lowered when the broker refuses a reply as too large (reply_limit).
        self._reply_limit = BROKER_DEFAULT_MAX_MESSAGE_BYTES
        self._redeclare_after = 0.0  # time.monotonic() before which not to try again
        self.log = get_logger(component="worker", queue=settings.request_queue, pid=os.getpid())
        self.connection_name = f"prompt-worker {socket.gethostname()} pid {os.getpid()}"
        self._connection: BrokerConnection | None = None
        # The broker's resource alarms: while it blocks the connection, deliveries wait.
        self.flow = BrokerFlow(self.log, self._is_our_connection, self._on_flow_change)
        self._channel: AbstractRobustChannel | None = None
        self._queue: AbstractQueue | None = None
        self._consumer_tag: str | None = None
        # aiormq's channel the consumer is registered on, while it is.
        self._underlay: Any = None
        # The settlement of the channel's deliveries (one per channel).
        self._acks: BatchedAcks | None = None
        self._consume_wanted = False
        self._consuming_again: asyncio.Task[None] | None = None
        # A channel the broker closed and aio-pika did not restore: reconnect.
        self._restore_watch = ChannelWatch(self._wants_channel_back, self._log_not_restored)
        # Replies' message ids: unique per process (aiormq matches a returned reply
        # to its publish by message id) without a random UUID per reply.
        self._reply_ids = map(f"{uuid.uuid4().hex[:12]}-{{}}".format, itertools.count())
        self._link_up = False
        self._stop_requested = False
        # Set once the drain found nothing in flight and the connection is about to close.
        self._closing = False
        self._stop: asyncio.Event | None = None
        self._idle: asyncio.Event | None = None
        self._in_flight = 0
        self._exit_code = 0

    # -- readiness ---------------------------------------------------------------

    def readiness(self) -> dict[str, bool]:
        return {
            "connected": self._link_up,
            "consuming": self._consumer_tag is not None,
            "accepting": not self._stop_requested,
            "unblocked": not self.flow.blocked,
        }

    @property
    def ready(self) -> bool:
        return all(self.readiness().values())

    def _update_ready(self) -> None:
        self.metrics.ready.set(1 if self.ready else 0)

    def _on_link_down(self, sender: Any = None, exc: Any = None, *_: Any) -> None:
        if self._link_up and not self._stop_requested:
            reason = describe(exc) if isinstance(exc, BaseException) else None
            # Not `_in_flight`: the channel's handlers are cancelled before this runs.
            # The deliveries left open are the jobs the broker will hand out again.
            unsettled = self._acks.open_count if self._acks is not None else 0
            self.log.warning("broker_link_down", unsettled=unsettled, error=reason)
        self._link_up = False
        # A new connection starts unblocked; should the alarm last, its first reply
        # blocks it again.
        self.flow.release("connection lost")
        self._update_ready()
        channel, connection = self._channel, self._connection
        if sender is channel and channel is not None and connection is not None:
            self._restore_watch.closed(channel, connection)

    def _wants_channel_back(self) -> bool:
        # `_link_up`: aio-pika's restore (or a reconnect) got there first.
        return not (self._link_up or self._stop_requested)

    def _log_not_restored(self) -> None:
        self.log.warning("channel_not_restored", action="reconnecting")

    def _is_our_connection(self, connection: Any) -> bool:
        """Whether `connection` (aiormq's) is the one under the worker's connection now."""
        transport = self._connection.transport if self._connection is not None else None
        return transport is not None and transport.connection is connection

    def _on_flow_change(self) -> None:
        self.metrics.broker_blocked.set(1 if self.flow.blocked else 0)
        self._update_ready()

    def _on_link_up(self, *_: Any) -> None:
        self._link_up = True
        self._update_ready()

    async def _on_reopen(self, channel: Any) -> None:
        # aio-pika re-declared the topology on the new channel; the consumer is ours.
        if self._consume_wanted:
            try:
                await self._consume(channel)
            except Exception as exc:
                # The channel failed again: aio-pika reopens it and this runs once more.
                self.log.warning("consume_failed", error=repr(exc))
                return
        self._on_link_up()

    def _on_reconnected(self, *_: Any) -> None:
        self.metrics.reconnects.inc()
        # The node now in use: after a failover, another one than before.
        broker = self._connection.broker if self._connection is not None else None
        self.log.info("broker_reconnected", broker=broker)
        self._on_link_up()

    def _on_access_refused(self, _reason: str) -> None:
        # Wrong credentials stay wrong: stop (exit 2, as for bad settings) rather than
        # retry for ever behind a readiness probe that never says why.
        self._exit_code = 2
        self.request_stop()

    # -- lifecycle -----------------------------------------------------------------

    def request_stop(self) -> None:
        """Stop taking deliveries, finish those in flight, then return from `run`."""
        self._stop_requested = True
        self._update_ready()
        if self._stop is not None:
            self._stop.set()

    async def run(self) -> int:
        """Serve until `request_stop`; the exit code (2 for a topology conflict or
        credentials the broker refuses)."""
        self._stop = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        if self._stop_requested:
            return 0
        # The render helper starts while the connection is made and before consuming:
        # its start-up never lands on a job (nor on a benchmark's CPU figures).
        warming = asyncio.create_task(self.pool.warm_up())
        connecting = asyncio.create_task(self._start(warming))
        stopping = asyncio.create_task(self._stop.wait())
        await asyncio.wait({connecting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not connecting.done():
            # Asked to stop while the broker was still unreachable: nothing in flight.
            connecting.cancel()
            warming.cancel()
            await asyncio.gather(connecting, warming, return_exceptions=True)
            await self._close()
            return self._exit_code
        try:
            connecting.result()
        except (TopologyError, tls.TlsRefused, ChannelAccessRefused) as exc:
            stopping.cancel()
            warming.cancel()
            await asyncio.gather(warming, return_exceptions=True)
            self._log_refused_start(exc)
            await self._close()
            return 2
        await stopping
        await self._drain()
        await self._close()
        return self._exit_code

    def _log_refused_start(self, exc: Exception) -> None:
        """One error line for a start the broker refused for good (exit status 2)."""
        if isinstance(exc, TopologyError):
            self.log.error("topology_conflict", error=str(exc))
        elif isinstance(exc, tls.TlsRefused):
            self.log.error("broker_tls_refused", error=str(exc))
        else:  # the user may log in but not declare or use the worker's queues
            self.log.error(
                "broker_permission_refused",
                error=describe(exc),
                detail="grant the broker user the permissions of deploy/rabbitmq/users.json",
            )

    async def _start(self, warming: "asyncio.Task[bool]") -> None:
        addresses = split_addresses(self.settings.amqp_url)
        # One scheme for all addresses (the settings check it), so one TLS setting.
        broker_tls = tls.connect_kwargs(addresses[0], self.settings.tls)
        connection = BrokerConnection(
            connection_urls(self.settings.amqp_url),
            on_refused=self._on_access_refused,
            log=self.log,
            client_properties={"connection_name": self.connection_name},
            **broker_tls,
        )
        self._connection = connection
        connection.close_callbacks.add(self._on_link_down)
        connection.reconnect_callbacks.add(self._on_reconnected)
        self.log.info("connecting", url=redact_addresses(self.settings.amqp_url))
        for address in addresses:
            await tls.check_server(address, broker_tls)
        await connection.connect()
        channel, declared = await self._declare_until_done(connection)
        self._channel = channel
        channel.close_callbacks.add(self._on_link_down)
        channel.reopen_callbacks.add(self._on_reopen)
        self._queue = declared.request_queue
        if not await warming:
            self.log.warning("render_helper_unavailable", detail="will retry on the next big job")
        self._consume_wanted = True
        await self._consume(channel)
        self._link_up = True
        self.log.info(
            "consuming",
            # Which node of a cluster, the first time; `broker_reconnected` says it after.
            broker=connection.broker,
            prefetch=self.settings.prefetch,
            reply_queue=self.topology.reply_queue,
            dead_letter=self.topology.dead_letter,
        )
        self._update_ready()

    async def _declare_until_done(
        self, connection: BrokerConnection
    ) -> tuple[aio_pika.RobustChannel, topology.Declared]:
        """Open the worker's channel and declare the topology, again after each lost link.

        This runs once the connection is up but before aio-pika knows of a channel to
        restore, so a broker that goes away meanwhile (a restart: CONNECTION_FORCED, or
        INTERNAL_ERROR while its queues are still starting) would end `serve` with a
        traceback. It is a lost link like any other: wait for the robust connection to
        come back and try again, with the connection's own backoff for the pauses.
        """
        # Read just after connecting, the connection's pause is its backoff's first.
        pauses = Backoff(connection.reconnect_interval)
        while True:
            channel = connection.channel(publisher_confirms=True, on_return_raises=True)
            assert isinstance(channel, aio_pika.RobustChannel)
            try:
                await channel
                # Per-consumer QoS: global QoS on a quorum queue closes the connection (540).
                await channel.set_qos(prefetch_count=self.settings.prefetch, global_=False)
                return channel, await topology.declare(channel, self.topology)
            except ChannelPreconditionFailed as exc:
                raise TopologyError(
                    f"{exc}. The broker holds these objects with other arguments than "
                    f"{topology.rabbitmq_definitions(self.topology)}; delete or migrate them."
                ) from exc
            except START_RETRIED as exc:
                if isinstance(exc, NOT_RETRIED):
                    raise
                pause = pauses.next()
                self.log.warning(
                    "broker_link_down",
                    during="start",
                    broker=connection.broker,
                    error=describe(exc),
                    retry_in_s=pause,
                )
            # Closed by us, the channel is not one aio-pika restores after reconnecting.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(channel.close(), timeout=1)
            await asyncio.sleep(pause)
            await connection.ready()

    async def _consume(self, channel: AbstractRobustChannel) -> None:
        async with self._consumer_lock:
            underlay = await channel.get_underlay_channel()
            if self._consumer_tag is not None and self._underlay is underlay:
                return  # already consuming on this channel
            # Delivery tags number a channel's deliveries, whichever consumer they are
            # for (the prefetch switch starts a new one): one BatchedAcks per channel.
            if self._acks is None or self._acks.channel is not underlay:
                self._acks = BatchedAcks(underlay)
                underlay.on_consumer_cancel_callbacks.add(self._on_broker_cancel)
            consume_ok = await underlay.basic_consume(
                self.topology.request_queue, partial(self._on_message, self._acks)
            )
            tag = cast(str, consume_ok.consumer_tag)
            if not self._consume_wanted:  # the drain began meanwhile
                with contextlib.suppress(Exception):
                    await underlay.basic_cancel(tag)
                return
            self._underlay = underlay
            self._consumer_tag = tag
            self._update_ready()

    def _on_broker_cancel(self, frame: Any) -> None:
        """The broker cancelled the consumer (the request queue was deleted, ...)."""
        if frame.consumer_tag != self._consumer_tag:
            return
        self._consumer_tag = None
        self._update_ready()
        self.log.warning("consumer_cancelled_by_broker")
        if self._consume_wanted and (self._consuming_again is None or self._consuming_again.done()):
            self._consuming_again = asyncio.get_running_loop().create_task(self._consume_again())

    async def _consume_again(self) -> None:
        """Declare the request queue again (with its arguments) and consume, until it works."""
        failures = 0
        while self._consume_wanted and self._consumer_tag is None:
            assert self._queue is not None and self._channel is not None
            try:
                await self._queue.declare()
                if self._consume_wanted:
                    await self._consume(self._channel)
                    self.log.info("consuming_again")
            except Exception as exc:
                # A failed declare closes the channel: aio-pika reopens it, and
                # `_on_reopen` may consume first; this loop then ends.
                self.log.warning("consume_failed", error=repr(exc))
                await asyncio.sleep(backoff(failures))
                failures += 1

    async def _drain(self) -> None:
        assert self._idle is not None
        self.log.info("stopping", in_flight=self._in_flight)
        self._consume_wanted = False
        async with self._consumer_lock:
            await self._cancel_consumer()
        # Deliveries that arrived before the cancel-ok are already scheduled as tasks,
        # but each needs a couple of loop turns to reach `_on_message` and count itself.
        for _ in range(5):
            await asyncio.sleep(0)
        deadline = asyncio.get_running_loop().time() + self.settings.shutdown_timeout
        try:
            await asyncio.wait_for(self._idle.wait(), timeout=self.settings.shutdown_timeout)
            self._closing = True
            # A delivery may have slipped in between the idle signal and this line.
            if self._in_flight:
                remaining = max(0.0, deadline - asyncio.get_running_loop().time())
                await asyncio.wait_for(self._idle.wait(), timeout=remaining)
        except TimeoutError:
            self.log.warning(
                "shutdown_timeout",
                in_flight=self._in_flight,
                detail="unfinished jobs stay unacknowledged and will be redelivered",
            )
        self._closing = True

    async def _cancel_consumer(self) -> None:
        if self._underlay is not None and self._consumer_tag is not None:
            tag, self._consumer_tag = self._consumer_tag, None
            self._update_ready()
            try:
                # Forgetting the consumer first means a reconnect during the drain does
                # not restore it; the basic.cancel itself needs a live link.
                await asyncio.wait_for(
                    self._underlay.basic_cancel(tag), timeout=5 if self._link_up else 0.5
                )
            except Exception as exc:  # broker gone: its redelivery covers the rest
                self.log.warning("cancel_consumer_failed", error=repr(exc))

    def _switch_prefetch(self) -> None:
        """Consume again with the prefetch the policy now asks for (one switch at a time;
        the latest wish wins)."""
        if self._prefetch_switch is None or self._prefetch_switch.done():
            self._prefetch_switch = asyncio.get_running_loop().create_task(self._reconsume())

    async def _reconsume(self) -> None:
        applied: int | None = None
        failures = 0
        while self.prefetch.current != applied:
            prefetch = self.prefetch.current
            channel = self._channel
            if self._stop_requested or not self._consume_wanted or channel is None:
                return
            try:
                # Per-consumer QoS applies to consumers started after it: cancel, then
                # consume again. Jobs the old consumer holds are settled as usual, by
                # the channel's one BatchedAcks.
                async with self._consumer_lock:
                    await channel.set_qos(prefetch_count=prefetch, global_=False)
                    if self._consumer_tag is not None and self._underlay is not None:
                        tag, self._consumer_tag = self._consumer_tag, None
                        await self._underlay.basic_cancel(tag)
                await self._consume(channel)
            except Exception as exc:
                failures += 1
                self.log.warning(
                    "prefetch_switch_failed",
                    prefetch=prefetch,
                    consuming=self._consumer_tag is not None,
                    error=repr(exc),
                )
                if self._consumer_tag is not None:
                    return  # the old consumer still runs; a later job tries again
            else:
                applied = prefetch
                self.log.info("prefetch_switched", prefetch=prefetch)
            finally:
                self._update_ready()
            if applied != prefetch:
                # Cancelled but not consuming again: not ready until it is.
                await asyncio.sleep(backoff(failures))

    async def _close(self) -> None:
        self._restore_watch.cancel()
        if self._link_up:
            await asyncio.sleep(SETTLE_BEFORE_CLOSE)
        if self._connection is not None:
            try:
                # Bounded: on a stalled network the close handshake never completes.
                await asyncio.wait_for(self._connection.close(), timeout=5)
            except Exception as exc:
                self.log.warning("close_failed", error=repr(exc))
        self._link_up = False
        self._update_ready()
        self.pool.close()
        self.slice.close()
        self.log.info("stopped")

    # -- one delivery --------------------------------------------------------------

    async def _on_message(self, acks: BatchedAcks, message: DeliveredMessage) -> None:
        # A consumer only ever receives basic.deliver frames.
        tag = cast(int, cast(Basic.Deliver, message.delivery).delivery_tag)
        # Registered before anything else: no batched ack may cover a delivery that is
        # not settled, including one left for redelivery below.
        acks.register(tag)
        if self.flow.blocked:
            # The broker refuses the worker's publishes (a resource alarm): the reply
            # could not be sent, so the job waits here, neither rendered nor settled.
            await self.flow.admit()
        if self._closing:
            # A delivery sent before the consumer was cancelled, reaching us after the
            # drain found the worker idle. Left unacknowledged, the broker hands it to
            # another worker when the connection closes. Answering it now could get the
            # reply out but not the ack, and the job would be answered twice.
            self.log.debug("delivery_left_for_redelivery", attempt=delivery_count(message))
            return
        received = time.perf_counter()
        self._in_flight += 1
        self.metrics.in_flight.inc()
        if self._idle is not None:
            self._idle.clear()
        size = len(message.body)
        if self.prefetch.observe(size) is not None:
            self._switch_prefetch()
        delivery = Delivery(
            message,
            received,
            delivery_count(message),
            acks,
            tag,
            None if self.tracing is None else self._process_span(message, tag, size),
        )
        acquired = False
        try:
            if not self.budget.try_acquire(size):
                await self.budget.acquire(size)
            acquired = True
            await self._handle(delivery)
        except asyncio.CancelledError:
            # The channel closed under us (connection lost): the broker redelivers.
            self.log.warning("job_abandoned", reason="channel closed", attempt=delivery.attempt)
            raise
        except Exception as exc:  # a bug of ours must not kill the consumer
            pause = backoff(delivery.attempt)
            self.log.error(
                "job_handling_failed",
                attempt=delivery.attempt,
                backoff_s=pause,
                exception=format_exception(exc),
            )
            await asyncio.sleep(pause)
            if acks.is_unsettled(delivery.tag):
                await self._settle(delivery, "requeue")
        finally:
            if delivery.span is not None:
                delivery.span.end()
            if acquired:
                self.budget.release(size)
            self._in_flight -= 1
            self.metrics.in_flight.dec()
            if self._in_flight == 0 and self._idle is not None:
                self._idle.set()

    def _process_span(self, message: DeliveredMessage, tag: int, size: int) -> "ProcessSpan":
        assert self.tracing is not None
        properties = message.header.properties
        return self.tracing.process(
            properties.headers,
            queue=self.settings.request_queue,
            message_id=properties.message_id,
            correlation_id=properties.correlation_id,
            delivery_tag=tag,
            redelivered=bool(cast(Basic.Deliver, message.delivery).redelivered),
            body_size=size,
        )

    async def _handle(self, delivery: Delivery) -> None:
        decision = await self._decide(delivery)
        outcome = decision.outcome
        if delivery.span is not None and outcome is not None:
            delivery.span.rendered(
                status=outcome.status,
                job_id=outcome.job_id,
                kind=outcome.kind,
                family=outcome.family,
                template_version=outcome.template_version,
                error_code=outcome.error_code,
                masked=outcome.masked,
                trimmed=outcome.trimmed,
                tokens_left_out=outcome.tokens_left_out,
                phases=outcome.phases,
            )
        if decision.retry is None:
            decision = await self._publish(delivery, decision)
        await self._conclude(delivery, decision)

    async def _decide(self, delivery: Delivery) -> Decision:
        """Render the job, here or in the helper process: the reply and how to settle."""
        body = delivery.message.body
        try:
            outcome, trace, offloaded = await self._render(body, delivery.attempt)
        except RenderProcessDied as exc:
            return self._retry_or_answer(
                delivery,
                Retry(f"render helper died: {exc}"),
                ErrorCode.INTERNAL,
                "the render process died on every attempt at this job",
            )
        except RenderTimedOut as exc:
            self.metrics.render_timeout("helper")
            return self._retry_or_answer(
                delivery,
                Retry(f"render helper killed: {exc}"),
                ErrorCode.RENDER_TIMEOUT,
                f"rendering took longer than {self.settings.render_timeout:g} s "
                "on every attempt at this job",
            )
        except Exception as exc:  # a bug in the render path, outside the renderer's guard
            return self._retry_or_answer(
                delivery,
                Retry(f"render failed: {exc!r}", backoff=backoff(delivery.attempt)),
                ErrorCode.INTERNAL,
                f"internal error while handling the job: {type(exc).__name__}",
                trace=format_exception(exc),
            )
        return Decision(outcome, "ack" if outcome.ok else "dead_letter", offloaded, trace)

    def _retry_or_answer(
        self,
        delivery: Delivery,
        again: Retry,
        code: ErrorCode,
        message: str,
        trace: str | None = None,
    ) -> Decision:
        """Requeue a job that failed for want of a render; on the last delivery the
        queue allows, answer it with an error and dead-letter it instead, rather than
        let the broker dead-letter it without a reply."""
        if delivery.attempt < self.topology.delivery_limit:
            return Decision(None, "requeue", offloaded=True, trace=trace, retry=again)
        body = delivery.message.body
        job_id, kind = self._identity(body)
        outcome = error_reply(code, message, job_id=job_id, kind=kind, request_bytes=len(body))
        return Decision(outcome, "dead_letter", offloaded=True, trace=trace)

    @staticmethod
    def _identity(body: bytes) -> tuple[str | None, str | None]:
        """The job id and kind of a body that could not be rendered, if cheap to read."""
        if len(body) > PEEK_IDENTITY_BYTES:
            return None, None
        try:
            return peek_identity(orjson.loads(body))
        except orjson.JSONDecodeError:
            return None, None

    def _render_here(self, body: bytes) -> RenderOutcome:
        if self._faults:
            faults.inject(body)
        return self.renderer.render(body)

    async def _render(self, body: bytes, attempt: int) -> tuple[RenderOutcome, str | None, bool]:
        """The outcome, the trace of an internal error, and whether it was offloaded."""
        size = len(body)
        # Oversize bodies are refused without being parsed: cheap, so never offloaded.
        offload = size <= self.settings.max_message_bytes and (
            size > self.settings.offload_bytes or attempt > 0
        )
        if not offload:
            try:
                outcome = self.slice.run(self._render_here, body)
            except SliceOverrun:
                # Abandoned half-way (a render has no side effects): the helper renders
                # it again from the start, under the render deadline.
                self.metrics.render_timeout("event_loop")
                self.log.warning(
                    "render_moved_to_helper", request_bytes=size, slice_s=self.slice.seconds
                )
            else:
                trace = None
                if outcome.exception is not None:
                    trace = format_exception(outcome.exception)
                return outcome, trace, False
        outcome, trace = await self.pool.render(body, self.settings.render_timeout)
        return outcome, trace, True

    async def _publish(self, delivery: Delivery, decision: Decision) -> Decision:
        """Publish the reply and wait for the broker's confirm; the decision it leaves."""
        outcome = decision.outcome
        assert outcome is not None
        if len(outcome.body) > self._reply_limit:
            # Refused by the broker it would close the channel, and come back again on
            # every delivery: answer with an error that fits, and keep the job.
            outcome = error_reply(
                ErrorCode.PAYLOAD_TOO_LARGE,
                f"the reply of {len(outcome.body)} bytes exceeds the broker's limit of "
                f"{self._reply_limit} bytes",
                job_id=outcome.job_id,
                kind=outcome.kind,
                details=[{"field": "", "type": "reply_too_large", "message": "reply too large"}],
                request_bytes=len(delivery.message.body),
            )
            decision = replace(decision, outcome=outcome, settle="dead_letter")
        reply_to = delivery.reply_to
        routing_key = reply_to or self.topology.reply_queue
        try:
            try:
                await self._send(outcome, delivery, routing_key)
            except PublishError:
                if reply_to is not None or time.monotonic() < self._redeclare_after:
                    raise
                # Our own reply queue was deleted under us: it is ours to declare (the
                # worker declared it at start-up), so declare it again and publish once
                # more; `PublishError` again means it cannot be had.
                await self._redeclare_reply_queue()
                await self._send(outcome, delivery, routing_key)
        except PublishError:
            if reply_to is not None:
                # The RPC client's reply queue is gone (it timed out or exited): nobody
                # can ever read this reply. Settle the job as if answered; retrying
                # would loop until the delivery limit for nothing.
                self.log.warning("reply_unroutable", job_id=outcome.job_id, reply_to_gone=True)
                return decision
            # The reply queue could not be declared again: keep the job, in the
            # dead-letter queue, instead of answering into the void.
            self.log.error(
                "reply_unroutable", job_id=outcome.job_id, reply_queue=self.topology.reply_queue
            )
            return replace(decision, settle="dead_letter")
        except DeliveryError as exc:
            # Refused (a full reply queue with reject-publish): the same reply would be
            # refused again at once, so wait longer each delivery; on the last one the
            # queue allows, keep the job in the dead-letter queue (an error reply to
            # the same queue would be refused too).
            if delivery.attempt < self.topology.delivery_limit:
                again = Retry(f"reply nacked: {exc}", backoff=backoff(delivery.attempt))
                return replace(decision, settle="requeue", retry=again)
            self.log.error("reply_refused", job_id=outcome.job_id, attempt=delivery.attempt)
            return replace(decision, settle="dead_letter")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            limit = limit_from_refusal(exc)
            if limit is not None and limit < self._reply_limit:
                # The broker closed the channel over the reply's size: from now on such
                # replies are caught before publishing, this one on its redelivery.
                self._reply_limit = limit
                self.log.warning("broker_max_message_size", limit_bytes=limit)
            # Connection or channel trouble: the reply may or may not have reached the
            # broker. Not acknowledging means the job comes back after reconnecting.
            again = Retry(f"reply not confirmed: {exc!r}", settled="unsettled")
            return replace(decision, settle="requeue", retry=again)
        return decision

    async def _send(self, outcome: RenderOutcome, delivery: Delivery, routing_key: str) -> None:
        """Publish the reply and wait for its confirm (raises as `basic_publish` does)."""
        request = delivery.message.header.properties
        properties = Basic.Properties(
            content_type="application/json",
            delivery_mode=2,  # persistent
            correlation_id=request.correlation_id or outcome.job_id or request.message_id,
            message_id=next(self._reply_ids),
        )
        sent = None if delivery.span is None else delivery.span.send(routing_key)
        if sent is not None:
            properties.headers = dict(sent.headers)
        # On the channel the job came on, which is the worker's publishing channel.
        # `wait=False`: the confirm awaited here says more than the socket drain.
        try:
            await cast(aiormq.Channel, delivery.message.channel).basic_publish(
                outcome.body,
                routing_key=routing_key,
                properties=properties,
                mandatory=True,
                wait=False,
            )
        except BaseException as exc:
            if sent is not None:
                sent.end(exc)
            raise
        if sent is not None:
            sent.end()

    async def _redeclare_reply_queue(self) -> None:
        assert self._channel is not None
        self.log.warning("reply_queue_redeclared", reply_queue=self.topology.reply_queue)
        try:
            await self._channel.declare_queue(
                self.topology.reply_queue,
                durable=True,
                arguments=topology.reply_queue_arguments(),
            )
        except Exception as exc:  # the second publish reports what this means for the job
            self._redeclare_after = time.monotonic() + REDECLARE_PAUSE
            self.log.error(
                "reply_queue_declare_failed", error=repr(exc), next_try_in_s=REDECLARE_PAUSE
            )

    async def _conclude(self, delivery: Delivery, decision: Decision) -> None:
        """Settle the job, then count and log it: one log line per delivery."""
        retry = decision.retry
        if retry is not None:
            # Logged first, so that the line's duration is the job's, not the backoff's.
            self._log_job(delivery, decision, retry.settled)
            if retry.backoff:
                await asyncio.sleep(retry.backoff)
            await self._settle(delivery, "requeue")
            return
        settled = await self._settle(delivery, decision.settle)
        assert decision.outcome is not None
        trace_id = None if delivery.span is None else delivery.span.trace_id
        self._record(decision.outcome, len(delivery.message.body), delivery.received, trace_id)
        self._log_job(delivery, decision, settled)

    async def _settle(self, delivery: Delivery, how: Settle) -> str:
        """Ack, dead-letter or requeue; what happened ("unsettled" if the channel is gone).

        "acked" means the acknowledgement is handed to the channel, possibly in a batch
        another delivery's handler sends a moment later (`BatchedAcks`); a batch the
        channel fails under is logged once, by the handler that was sending it.
        """
        acks, tag = delivery.acks, delivery.tag
        try:
            if how == "ack":
                await acks.ack(tag)
                return "acked"
            if how == "dead_letter":
                await acks.reject(tag, requeue=False)
                return "dead_lettered"
            await acks.reject(tag, requeue=True)
            return "requeued"
        except asyncio.CancelledError:
            raise
        except AcksNotSent as exc:
            self.log.warning("settle_failed", how=how, error=str(exc), jobs=exc.deliveries)
            return "unsettled"
        except Exception as exc:
            # The channel closed after the reply was confirmed: the job will be
            # delivered again and answered twice, which consumers already tolerate.
            self.log.warning("settle_failed", how=how, error=repr(exc))
            return "unsettled"

    def _record(
        self,
        outcome: RenderOutcome,
        request_bytes: int,
        received: float,
        trace_id: str | None = None,
    ) -> None:
        ok = outcome.ok
        self.metrics.job_done(
            kind_label(outcome.kind),
            outcome.status,
            outcome.error_code or "",
            seconds=time.perf_counter() - received,
            request_bytes=request_bytes,
            render_seconds=outcome.render_seconds if ok else None,
            prompt_chars=outcome.prompt_chars,
            masked=outcome.masked,
            tokens_left_out=outcome.tokens_left_out if outcome.trimmed else None,
            trace_id=trace_id,
        )

    def _log_job(self, delivery: Delivery, decision: Decision, settled: str) -> None:
        """The one log line of a delivery. Facts only: never payload text (but at debug)."""
        outcome, message, retry = decision.outcome, delivery.message, decision.retry
        reply_to = delivery.reply_to
        fields: dict[str, Any] = {
            "job_id": outcome.job_id if outcome else None,
            "kind": kind_label(outcome.kind) if outcome else None,
            "status": outcome.status if outcome else None,
            "code": outcome.error_code if outcome else None,
            "request_bytes": len(message.body),
            "prompt_chars": outcome.prompt_chars if outcome else 0,
            "render_ms": round(outcome.render_seconds * 1000, 3) if outcome else None,
            "duration_ms": round((time.perf_counter() - delivery.received) * 1000, 3),
            "attempt": delivery.attempt,
            "offloaded": decision.offloaded,
            "reply": "reply_to" if reply_to else "default",
            "settled": settled,
        }
        if retry is not None:
            fields["reason"] = retry.reason
            if retry.backoff:
                fields["backoff_s"] = retry.backoff
        if outcome is not None and outcome.error_message:
            fields["error"] = outcome.error_message
        if retry is None and decision.trace is not None:
            fields["exception"] = decision.trace
        if payload_logging_enabled():
            fields["request"] = message.body[:DEBUG_PAYLOAD_CHARS].decode("utf-8", "replace")
        if outcome is not None and outcome.error_code == ErrorCode.INTERNAL.value:
            self.log.error("job", **fields)
        elif outcome is None or not outcome.ok or settled not in ("acked",):
            self.log.warning("job", **fields)
        else:
            self.log.info("job", **fields)
