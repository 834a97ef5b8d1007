"""The queue consumer: deliveries in, replies out, at least once, until asked to stop.

`Worker` puts three parts together and runs them: the link (`worker.transport.consumer.link`:
connection, channel, topology and consumer, kept up by a loop of the worker's own), one
delivery's path (`worker.transport.consumer.delivery`: render, publish, confirm, settle) and
readiness (`worker.transport.consumer.readiness`). It owns the worker's life: start, the
graceful stop (no new deliveries, those in flight finished, then the connection
closed) and the exit status.
"""

import asyncio
import os
import socket
import ssl
from typing import TYPE_CHECKING, Any

from aiormq.abc import AbstractConnection
from structlog.typing import FilteringBoundLogger

from worker import __version__
from worker.archive.recorder import ArchiveRecorder, ArchiveSettings
from worker.ops.logs import get_logger
from worker.ops.metrics import Metrics
from worker.render.renderer import Renderer
from worker.tasks import cancel_for_good
from worker.transport.consumer.backpressure import ReplyBackpressure, ReplyChannels
from worker.transport.consumer.delivery import DeliveryPath
from worker.transport.consumer.link import (
    REFUSED_FOR_GOOD,
    ConsumerLink,
    PermissionRefused,
    TopologyError,
)
from worker.transport.consumer.readiness import Readiness
from worker.transport.link import tls
from worker.transport.link.addresses import open_first, split_addresses
from worker.transport.link.broker_failures import describe
from worker.transport.link.connection import AccessRefused
from worker.transport.link.flow import BrokerFlow
from worker.transport.processes.offload import RenderPool
from worker.transport.settings import Settings

if TYPE_CHECKING:
    # Only with tracing on is OpenTelemetry imported (worker.ops.tracing).
    from worker.ops.otel import JobTracing

# RabbitMQ applies acknowledgements to a quorum queue asynchronously: a connection
# closed right after the last ones can have those messages returned to the queue and
# delivered again, so a SIGTERM drain answered its last jobs twice now and then
# (docs/PERFORMANCE.md, "The transport's hot path"). Pausing before the close lets them
# settle. Delivery stays at least once either way; a clean stop just no longer causes
# duplicates.
SETTLE_BEFORE_CLOSE = 0.3
# The longest the first consumer waits for the render helper's start-up (about a second
# of a core; much more only on a machine short of CPU or memory).
HELPER_START_WAIT = 30.0


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
        self.metrics = metrics
        self.log: FilteringBoundLogger = get_logger(
            component="worker", queue=settings.request_queue, pid=os.getpid()
        )
        # The broker's resource alarms: while it blocks the connection, deliveries wait.
        self.flow = BrokerFlow(self.log, self._on_flow_change)
        self.state = Readiness(metrics, self.flow)
        backpressure = ReplyBackpressure(
            self.state,
            metrics,
            self.log,
            ReplyChannels(self._main_connection, self._side_connection),
        )
        self.archive = self._recorder(settings, metrics)
        pool = render_pool or RenderPool(
            renderer.config,
            settings.max_message_bytes,
            renderer_class=type(renderer),
            keep_jobs=self.archive is not None,
        )
        self.deliveries = DeliveryPath(
            settings,
            renderer,
            metrics,
            pool,
            self.flow,
            self.log,
            backpressure=backpressure,
            redeclare_reply_queue=self._redeclare_reply_queue,
            prefetch_changed=self._switch_prefetch,
            tracing=tracing,
            archive=self.archive,
        )
        self.link = ConsumerLink(
            settings,
            connection_name=f"prompt-worker {socket.gethostname()} pid {os.getpid()}",
            readiness=self.state,
            flow=self.flow,
            prefetch=self.deliveries.prefetch,
            metrics=metrics,
            log=self.log,
            on_message=self.deliveries.on_message,
            before_consuming=self._render_helper_started,
        )
        self._stop = asyncio.Event()
        self._warming: asyncio.Task[None] | None = None

    def _recorder(self, settings: Settings, metrics: Metrics) -> ArchiveRecorder | None:
        """The archive's recorder (SPEC §12), None with the archive off."""
        if not settings.archive_stream:
            return None
        archive = ArchiveSettings(
            settings.archive_stream,
            settings.archive_max_age,
            settings.archive_max_bytes,
            settings.archive_confirm_timeout,
        )
        return ArchiveRecorder(archive, self._archive_connection, metrics, self.log, __version__)

    async def _archive_connection(self) -> AbstractConnection:
        """A connection of the archive's own, to the first of the addresses that answers."""
        name = f"prompt-worker {socket.gethostname()} pid {os.getpid()} archive"

        def context(url: str) -> ssl.SSLContext | None:
            return tls.connect_kwargs(url, self.settings.tls).get("ssl_context")

        return await open_first(split_addresses(self.settings.amqp_url), context, name)

    def readiness(self) -> dict[str, bool]:
        return self.state.facts()

    def notes(self) -> dict[str, Any]:
        """Facts for /readyz that do not make the worker unready: the archive's state."""
        return {"archive": self.archive.status() if self.archive is not None else None}

    @property
    def ready(self) -> bool:
        return self.state.ready

    def _on_flow_change(self) -> None:
        self.state.update()

    # The link is made after the delivery path it hands deliveries to; these reach it.
    def _main_connection(self) -> AbstractConnection | None:
        return self.link.main_connection()

    async def _side_connection(self) -> AbstractConnection:
        return await self.link.side_connection()

    async def _redeclare_reply_queue(self) -> None:
        await self.link.redeclare_reply_queue()

    def _switch_prefetch(self) -> None:
        self.link.switch_prefetch()

    def request_stop(self) -> None:
        """Stop taking deliveries, finish those in flight, then return from `run`."""
        self.state.accepting = False
        self.state.update()
        self._stop.set()

    async def run(self) -> int:
        """Serve until `request_stop`; the exit code (2 for a topology conflict, a TLS
        certificate refused, a permission or credentials the broker refuses)."""
        if self._stop.is_set():
            return 0
        pool = self.deliveries.pool
        # The render helper starts while the connection is made, and the consumer waits
        # for it (`_render_helper_started`): its start-up never lands on a job (nor on a
        # benchmark's CPU figures).
        warming = self._warming = asyncio.create_task(self._warm_up(pool))
        if self.archive is not None:
            self.archive.start()
        keeping = asyncio.create_task(self.link.keep())
        stopping = asyncio.create_task(self._stop.wait())
        await asyncio.wait({keeping, stopping}, return_when=asyncio.FIRST_COMPLETED)
        exit_code = 0
        if keeping.done():
            stopping.cancel()
            exit_code = self._refused(keeping)
        else:
            await self._drain()
            await cancel_for_good(keeping)
        warming.cancel()
        await asyncio.gather(keeping, warming, stopping, return_exceptions=True)
        await self._close()
        return exit_code

    async def _render_helper_started(self) -> None:
        """Before the first consumer: wait for the render helper's start-up, bounded
        (the worker consumes without it rather than not at all)."""
        if self._warming is not None:
            await asyncio.wait({self._warming}, timeout=HELPER_START_WAIT)
        if self.archive is not None:
            # The first jobs' records need the archive's channel: wait for it as long
            # as one record may wait, no longer (consuming never depends on the archive).
            await self.archive.wait_up(self.settings.archive_confirm_timeout)

    async def _warm_up(self, pool: RenderPool) -> None:
        if not await pool.warm_up():
            self.log.warning("render_helper_unavailable", detail="will retry on the next big job")

    def _refused(self, keeping: "asyncio.Task[None]") -> int:
        """The exit status for a link that ended for good, with its one error line."""
        exc = keeping.exception()
        if isinstance(exc, AccessRefused):
            # Wrong credentials stay wrong: stop (exit 2, as for bad settings) rather
            # than retry for ever behind a readiness probe that never says why.
            return 2
        if isinstance(exc, TopologyError):
            self.log.error("topology_conflict", error=str(exc))
        elif isinstance(exc, tls.TlsRefused):
            self.log.error("broker_tls_refused", error=str(exc))
        elif isinstance(exc, REFUSED_FOR_GOOD):
            # The user may log in but not declare or use the worker's queues.
            self.log.error(
                "broker_permission_refused",
                error=describe(exc.refusal if isinstance(exc, PermissionRefused) else exc),
                permission=exc.permission if isinstance(exc, PermissionRefused) else None,
                detail="grant the broker user the permissions of deploy/rabbitmq/users.json",
            )
        elif exc is not None:
            raise exc
        return 2

    async def _drain(self) -> None:
        deliveries = self.deliveries
        loop = asyncio.get_running_loop()
        # The timeout counts from the signal: a cancel held up by a stalled link spends
        # it too, so the worker stops within what the orchestrator's grace period allows.
        deadline = loop.time() + self.settings.shutdown_timeout

        def remaining() -> float:
            return max(0.0, deadline - loop.time())

        self.log.info("stopping", in_flight=deliveries.in_flight)
        await self.link.stop_consuming(within=remaining())
        # Deliveries that arrived before the cancel-ok are already scheduled as tasks,
        # but each needs a couple of loop turns to reach `on_message` and count itself.
        for _ in range(5):
            await asyncio.sleep(0)
        try:
            await self._until_idle(remaining())
            deliveries.closing = True
            # A delivery may have slipped in between the idle signal and this line.
            await self._until_idle(remaining())
        except TimeoutError:
            self.log.warning(
                "shutdown_timeout",
                in_flight=deliveries.in_flight,
                detail="unfinished jobs stay unacknowledged and will be redelivered",
            )
        deliveries.closing = True

    async def _until_idle(self, within: float) -> None:
        """Until no delivery is in flight; TimeoutError after `within` seconds."""
        if self.deliveries.in_flight:
            await asyncio.wait_for(self.deliveries.idle.wait(), timeout=within)

    async def _close(self) -> None:
        if self.link.up:
            await asyncio.sleep(SETTLE_BEFORE_CLOSE)
        await self.deliveries.backpressure.close()
        if self.archive is not None:
            await self.archive.close()
        await self.link.close()
        self.deliveries.close()
        self.log.info("stopped")
