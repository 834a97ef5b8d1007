"""The worker's link, kept up: a connection, one channel, the topology and the consumer.

`ConsumerLink.keep()` is one loop of the worker's own, running for its whole life:

1. connect (`BrokerLink`: round the cluster's addresses, with backoff and jitter; wrong
   credentials end the loop with `AccessRefused`);
2. open the channel (publisher confirms, returns raised), set the prefetch, declare the
   topology, register the consumer;
3. wait for the connection's or the channel's `closing` future, aiormq's public
   awaitables: whatever ends the link reaches the loop there, as the exception it
   carries;
4. a lost connection: move on to the next address and start again at 1; a lost channel
   on a connection still up (a channel error): open a new channel on it, and when the
   broker refuses that too, drop the connection and start again at 1.

At start-up, a topology conflict (406 PRECONDITION_FAILED) or a user without the
permissions on the worker's queues ends the loop for good (exit status 2): retrying
cannot help. Later the same refusals are taken as a link that could not be restored
yet, and retried with the backoff's pauses: the worker was fine a moment ago, and an
operator may be mid-change.
"""

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from typing import Any, cast

from aiormq.abc import AbstractChannel, AbstractConnection, DeliveredMessage
from aiormq.exceptions import ChannelAccessRefused, ChannelPreconditionFailed
from structlog.typing import FilteringBoundLogger

from worker.ops.metrics import Metrics
from worker.transport.consumer.acks import BatchedAcks
from worker.transport.consumer.inflight import PrefetchPolicy
from worker.transport.consumer.readiness import Readiness
from worker.transport.link import tls, topology
from worker.transport.link.addresses import split_addresses
from worker.transport.link.broker_failures import describe, refused_detail
from worker.transport.link.connection import BROKER_CALL_TIMEOUT, BrokerLink, connection_urls
from worker.transport.link.flow import BrokerFlow
from worker.transport.retry import backoff
from worker.transport.settings import Settings

OnMessage = Callable[[BatchedAcks, DeliveredMessage], Coroutine[Any, Any, None]]
BeforeConsuming = Callable[[], Awaitable[None]]


class TopologyError(Exception):
    """The broker holds a queue or exchange of ours with different arguments."""


class PermissionRefused(Exception):
    """The broker refused the worker's user a step of its start-up: `permission` is the
    one that step needs (RabbitMQ 3.x's refusal names only the object)."""

    def __init__(self, permission: str, refusal: ChannelAccessRefused) -> None:
        super().__init__(str(refusal))
        self.permission = permission
        self.refusal = refusal


# Refusals at start-up that no retry can get past (exit status 2).
REFUSED_FOR_GOOD = (TopologyError, PermissionRefused, ChannelAccessRefused, tls.TlsRefused)


class ConsumerLink:
    """The worker's connection, channel and consumer, re-made after each loss."""

    def __init__(
        self,
        settings: Settings,
        *,
        connection_name: str,
        readiness: Readiness,
        flow: BrokerFlow,
        prefetch: PrefetchPolicy,
        metrics: Metrics,
        log: FilteringBoundLogger,
        on_message: OnMessage,
        before_consuming: BeforeConsuming | None = None,
    ) -> None:
        self.settings = settings
        self.topology = settings.topology
        self.connection_name = connection_name
        self.readiness = readiness
        self.flow = flow
        self.prefetch = prefetch
        self.metrics = metrics
        self.log = log
        self._on_message = on_message
        # Awaited once, before the first consumer is registered.
        self._before_consuming = before_consuming
        self.link: BrokerLink | None = None
        self.connection: AbstractConnection | None = None
        self.channel: AbstractChannel | None = None
        # The settlement of the channel's deliveries (one per channel).
        self.acks: BatchedAcks | None = None
        self.consumer_tag: str | None = None
        # False once the drain began: nothing consumes again, nothing reconnects.
        self.consume_wanted = True
        # Held while the consumer is started, replaced (new prefetch) or cancelled.
        self._consumer_lock = asyncio.Lock()
        self._prefetch_switch: asyncio.Task[None] | None = None
        self._consuming_again: asyncio.Task[None] | None = None

    @property
    def up(self) -> bool:
        return self.readiness.connected

    # -- the loop ----------------------------------------------------------------

    async def keep(self) -> None:
        """Keep the link up until the drain; raises what ends it for good."""
        addresses = split_addresses(self.settings.amqp_url)
        # One scheme for all addresses (the settings check it), so one TLS setting.
        broker_tls = tls.connect_kwargs(addresses[0], self.settings.tls)
        for address in addresses:
            await tls.check_server(address, broker_tls)
        link = self.link = BrokerLink(
            connection_urls(self.settings.amqp_url),
            log=self.log,
            flow=self.flow,
            client_properties={"connection_name": self.connection_name},
            ssl_context=broker_tls.get("ssl_context"),
            refused_hint=refused_detail(self.settings.source_of("amqp_url")),
        )
        first = True
        connection: AbstractConnection | None = None
        while self.consume_wanted:
            fresh = connection is None or connection.is_closed
            if connection is None or connection.is_closed:
                connection = self.connection = await link.connect()
            try:
                channel = await self._open(connection, first=first)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if first and isinstance(exc, REFUSED_FOR_GOOD):
                    await self.close()
                    raise
                if not fresh:
                    # A lost channel on a live connection, and the broker refuses a new
                    # one: start from a new connection.
                    self.log.warning("channel_not_restored", action="reconnecting")
                lost_connection = connection.is_closed
                await self._drop(connection)
                connection = None
                # Before the first session the line says so: the broker went away while
                # the worker was starting, which it rides out like any lost link.
                during = {"during": "start"} if first else {}
                if lost_connection:
                    link.move_on()
                    await link.pause("broker_link_down", link.broker, exc, **during)
                else:
                    await link.restore_refused(exc, **during)
                continue
            self._link_up(link, first=first, fresh=fresh)
            first = False
            error, unsettled = await self._until_lost(connection, channel)
            self._link_down(error, unsettled)
            if connection.is_closed:
                # The node may be gone: the next attempt goes to the next address.
                link.move_on()
                connection = None

    async def _open(self, connection: AbstractConnection, *, first: bool) -> AbstractChannel:
        """A channel with the topology declared and the consumer registered. At start-up
        (`first`) a conflict with the broker's objects is a `TopologyError`."""
        # A returned reply raises `PublishError` from its publish, never a plain confirm.
        channel = await connection.channel(
            publisher_confirms=True, on_return_raises=True, timeout=BROKER_CALL_TIMEOUT
        )
        try:
            # Per-consumer QoS: global QoS on a quorum queue closes the connection (540).
            await channel.basic_qos(
                prefetch_count=self.prefetch.current, global_=False, timeout=BROKER_CALL_TIMEOUT
            )
            try:
                await topology.declare_on(channel, self.topology)
            except ChannelAccessRefused as exc:
                if not first:
                    raise  # a refusal to restore, retried
                raise PermissionRefused("configure", exc) from exc
            except ChannelPreconditionFailed as exc:
                if not first:
                    raise  # a refusal to restore (a queue limit, an operator mid-change)
                raise TopologyError(
                    f"{exc}. The broker holds these objects with other arguments than "
                    f"{topology.rabbitmq_definitions(self.topology)}; delete or migrate them."
                ) from exc
            self.channel = channel
            if first and self._before_consuming is not None:
                await self._before_consuming()
            if self.consume_wanted:
                try:
                    await self._consume(channel)
                except ChannelAccessRefused as exc:
                    if not first:
                        raise  # a refusal to restore, retried
                    raise PermissionRefused("read", exc) from exc
        except BaseException:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(channel.close(), timeout=1)
            raise
        return channel

    def _link_up(self, link: BrokerLink, *, first: bool, fresh: bool) -> None:
        link.backoff.reset()
        self.readiness.connected = True
        self.readiness.update()
        if first:
            self.log.info(
                "consuming",
                # Which node of a cluster, the first time; `broker_reconnected` says it after.
                broker=link.broker,
                prefetch=self.prefetch.current,
                reply_queue=self.topology.reply_queue,
                dead_letter=self.topology.dead_letter,
            )
        elif fresh:
            self.metrics.reconnects.inc()
            # The node now in use: after a failover, another one than before.
            self.log.info("broker_reconnected", broker=link.broker)
        else:
            self.log.info("channel_reopened", broker=link.broker)

    async def _until_lost(
        self, connection: AbstractConnection, channel: AbstractChannel
    ) -> tuple[BaseException | None, int]:
        """Wait until the connection or the channel closes; the error that closed it,
        and how many deliveries were open then."""
        watched = [connection.closing, channel.closing]
        # Counted when the loss is told, before the deliveries' handlers learn of it
        # (their publishes fail, and they settle nothing on a closed channel).
        open_at_loss: list[int] = []

        def count_open(_: object) -> None:
            if not open_at_loss:
                open_at_loss.append(self.acks.open_count if self.acks is not None else 0)

        for observer in watched:
            observer.add_done_callback(count_open)
        try:
            done, _ = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for observer in watched:
                observer.cancel()  # only this observer, never the resource
        unsettled = open_at_loss[0] if open_at_loss else 0
        for future in done:
            if not future.cancelled() and future.exception() is not None:
                return future.exception(), unsettled
        return None, unsettled

    def _link_down(self, error: BaseException | None, unsettled: int) -> None:
        if self.readiness.connected and self.consume_wanted:
            # The deliveries left open are jobs the broker will hand out again; so are
            # those whose acknowledgement was written but lost with the link (at least
            # once), which no client can count.
            self.log.warning(
                "broker_link_down",
                unsettled=unsettled,
                error=describe(error) if error is not None else None,
            )
        self.readiness.connected = False
        self.consumer_tag = None
        self.readiness.consuming = False
        if self.connection is None or self.connection.is_closed:
            # A new connection starts unblocked; should the alarm last, its first reply
            # blocks it again.
            self.flow.release("connection lost")
        self.readiness.update()

    async def _drop(self, connection: AbstractConnection) -> None:
        with contextlib.suppress(Exception):
            # Bounded: on a stalled network the close handshake never completes.
            await asyncio.wait_for(connection.close(), timeout=5)

    # -- the consumer ------------------------------------------------------------

    async def _consume(self, channel: AbstractChannel) -> None:
        async with self._consumer_lock:
            consuming = self.consumer_tag is not None and self.acks is not None
            if consuming and self.acks is not None and self.acks.channel is channel:
                return  # already consuming on this channel
            # Delivery tags number a channel's deliveries, whichever consumer they are
            # for (the prefetch switch starts a new one): one BatchedAcks per channel.
            if self.acks is None or self.acks.channel is not channel:
                self.acks = BatchedAcks(channel)
                channel.on_consumer_cancel_callbacks.add(self._on_broker_cancel)
            consume_ok = await channel.basic_consume(
                self.topology.request_queue,
                partial(self._on_message, self.acks),
                timeout=BROKER_CALL_TIMEOUT,
            )
            tag = cast(str, consume_ok.consumer_tag)
            if not self.consume_wanted:  # the drain began meanwhile
                with contextlib.suppress(Exception):
                    await channel.basic_cancel(tag, timeout=BROKER_CALL_TIMEOUT)
                return
            self.consumer_tag = tag
            self.readiness.consuming = True
            self.readiness.update()

    def _on_broker_cancel(self, frame: Any) -> None:
        """The broker cancelled the consumer (the request queue was deleted, ...)."""
        if frame.consumer_tag != self.consumer_tag:
            return
        self.consumer_tag = None
        self.readiness.consuming = False
        self.readiness.update()
        self.log.warning("consumer_cancelled_by_broker")
        if self.consume_wanted and (self._consuming_again is None or self._consuming_again.done()):
            self._consuming_again = asyncio.get_running_loop().create_task(self._consume_again())

    async def _consume_again(self) -> None:
        """Declare the request queue again (with its arguments) and consume, until it works."""
        failures = 0
        while self.consume_wanted and self.consumer_tag is None:
            channel = self.channel
            if channel is None or channel.is_closed:
                return  # the loop opens a new channel, and consumes on it
            try:
                await topology.declare_request_queue(channel, self.topology)
                if self.consume_wanted:
                    await self._consume(channel)
                    self.log.info("consuming_again")
            except Exception as exc:
                # A failed declare closes the channel: the loop opens a new one.
                self.log.warning("consume_failed", error=repr(exc))
                await asyncio.sleep(backoff(failures))
                failures += 1

    async def redeclare_reply_queue(self) -> None:
        """Declare the default reply queue again; raises as the declaration does."""
        channel = self.channel
        assert channel is not None
        self.log.warning("reply_queue_redeclared", reply_queue=self.topology.reply_queue)
        await topology.declare_reply_queue(channel, self.topology)

    def switch_prefetch(self) -> None:
        """Consume again with the prefetch the policy now asks for (one switch at a time;
        the latest wish wins)."""
        if self._prefetch_switch is None or self._prefetch_switch.done():
            self._prefetch_switch = asyncio.get_running_loop().create_task(self._reconsume())

    async def _reconsume(self) -> None:
        applied: int | None = None
        failures = 0
        while self.prefetch.current != applied:
            prefetch = self.prefetch.current
            channel = self.channel
            if not self.consume_wanted or channel is None or channel.is_closed:
                return  # a new channel starts with the prefetch in effect
            try:
                # Per-consumer QoS applies to consumers started after it: cancel, then
                # consume again. Jobs the old consumer holds are settled as usual, by
                # the channel's one BatchedAcks.
                async with self._consumer_lock:
                    await channel.basic_qos(
                        prefetch_count=prefetch, global_=False, timeout=BROKER_CALL_TIMEOUT
                    )
                    if self.consumer_tag is not None:
                        tag, self.consumer_tag = self.consumer_tag, None
                        await channel.basic_cancel(tag, timeout=BROKER_CALL_TIMEOUT)
                await self._consume(channel)
            except Exception as exc:
                failures += 1
                self.log.warning(
                    "prefetch_switch_failed",
                    prefetch=prefetch,
                    consuming=self.consumer_tag is not None,
                    error=repr(exc),
                )
                if self.consumer_tag is not None:
                    return  # the old consumer still runs; a later job tries again
            else:
                applied = prefetch
                self.log.info("prefetch_switched", prefetch=prefetch)
            finally:
                self.readiness.consuming = self.consumer_tag is not None
                self.readiness.update()
            if applied != prefetch:
                # Cancelled but not consuming again: not ready until it is.
                await asyncio.sleep(backoff(failures))

    async def stop_consuming(self, within: float) -> None:
        """The drain's first step: no more deliveries, now or after a reconnect. The
        broker's cancel-ok is awaited at most `within` seconds (the drain's time left)."""
        self.consume_wanted = False
        async with self._consumer_lock:
            channel, tag = self.channel, self.consumer_tag
            if channel is None or tag is None:
                return
            self.consumer_tag = None
            self.readiness.consuming = False
            self.readiness.update()
            try:
                # Forgetting the consumer first means a reconnect during the drain does
                # not restore it; the basic.cancel itself needs a live link.
                await channel.basic_cancel(tag, timeout=min(5 if self.up else 0.5, within))
            except Exception as exc:  # broker gone: its redelivery covers the rest
                self.log.warning("cancel_consumer_failed", error=repr(exc))

    def main_connection(self) -> AbstractConnection | None:
        return self.connection if self.up else None

    async def side_connection(self) -> AbstractConnection:
        """A connection of its own to the node after the one in use (one attempt), for
        replies the worker's connection cannot get confirmed."""
        assert self.link is not None
        urls = self.link.urls
        after = (self.link.current + 1) % len(urls)
        side = BrokerLink(
            urls[after:] + urls[:after],
            log=self.log,
            # Its own alarms say nothing about the worker's connection.
            flow=BrokerFlow(self.log, lambda: None),
            client_properties={"connection_name": f"{self.connection_name} replies"},
            ssl_context=self.link.ssl_context,
            refused_hint=self.link.refused_hint,
        )
        return await side.attempt()

    async def close(self) -> None:
        self.consume_wanted = False
        for task in (self._prefetch_switch, self._consuming_again):
            if task is not None:
                task.cancel()
        connection = self.connection
        if connection is not None and not connection.is_closed:
            try:
                # Bounded: on a stalled network the close handshake never completes.
                await asyncio.wait_for(connection.close(), timeout=5)
            except Exception as exc:
                self.log.warning("close_failed", error=repr(exc))
        self.readiness.connected = False
        self.readiness.update()
