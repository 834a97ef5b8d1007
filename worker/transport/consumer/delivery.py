"""One delivery's path: bytes in, a render, the reply published and confirmed, the job
settled, one log line.

For each delivery: render the body (`Renderer.render` never raises), publish the reply
and wait for the broker's confirm, then settle the request — ack when the job rendered,
reject without requeue (so it is dead-lettered for inspection) when the reply is an
error. Nothing is settled before the reply is confirmed, so a worker or broker dying at
any point means the request is delivered again, never lost; replies can therefore be
duplicated and consumers of replies deduplicate by correlation id / job id.

When the reply cannot be delivered:

* `reply_to` names a queue that no longer exists (the RPC client timed out or exited):
  replies are published `mandatory`, and the link raises the broker's return
  (`PublishError`), so it is seen; the job is settled as if answered (and the return
  logged), because no retry could ever reach that client and requeueing would loop to
  the delivery limit for nothing;
* the default reply queue is missing (deleted under a running worker): it is declared
  again and the reply published once more; if that fails too, the job is dead-lettered
  rather than answered into the void;
* the broker refuses the reply (nack: a full reply queue, a queue without a leader):
  backpressure, never a dead letter. The job is held, unacknowledged, new deliveries
  wait, and the reply is published again until confirmed
  (`worker.transport.consumer.backpressure`), then the job is acknowledged. Should the
  broker take the job back meanwhile, the reply is still published, and the job's
  redelivery is acknowledged once it is confirmed, not rendered again;
* the connection or channel fails while publishing: the delivery went with the channel,
  so the broker hands the job out again, and it is answered then (the worker cannot
  acknowledge it any more: publishing its reply elsewhere would only answer it twice);
* the broker blocks the connection (a memory or disk alarm): no reply can get through,
  so new deliveries wait, untouched, until it unblocks (`worker.transport.link.flow`).

The job code (`worker.render.renderer`) never sees the transport; this module never looks
inside a job beyond the facts `RenderOutcome` hands it, and makes no reply itself: when
it cannot send a render's own reply (too large for the broker, no render on any delivery,
a bug) it asks `render.replies.failure_reply` for one, with the reason. Deliveries arrive as
aiormq's `DeliveredMessage`, replies are published with aiormq's `basic_publish` on the
same channel and jobs settled through `worker.transport.consumer.acks` (acknowledgements
of one loop turn batched; requeues and
dead-letterings, also those after a backoff, go through it, so no batched ack covers
them): aio-pika's message objects and the extra task it runs per delivery cost a large
share of a job's CPU for nothing the worker uses (docs/PERFORMANCE.md, "The transport's
hot path").
"""

import asyncio
import itertools
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, cast

from aiormq.abc import AbstractChannel, DeliveredMessage
from aiormq.exceptions import DeliveryError, PublishError
from pamqp.commands import Basic
from structlog.typing import FilteringBoundLogger

from worker.archive.recorder import ArchiveRecorder
from worker.ops.logs import format_exception, payload_logging_enabled
from worker.ops.metrics import Metrics, kind_label
from worker.render.renderer import Renderer
from worker.render.replies import Failure, RenderOutcome, failure_reply
from worker.transport.consumer.acks import AcksNotSent, BatchedAcks
from worker.transport.consumer.backpressure import HeldReply, ReplyBackpressure, held_key
from worker.transport.consumer.inflight import ByteBudget, PrefetchPolicy
from worker.transport.consumer.reply_limit import (
    BROKER_DEFAULT_MAX_MESSAGE_BYTES,
    limit_from_refusal,
)
from worker.transport.link.flow import BrokerFlow
from worker.transport.processes.deadline import EventLoopSlice, SliceOverrun
from worker.transport.processes.offload import RenderPool, RenderProcessDied, RenderTimedOut
from worker.transport.retry import backoff
from worker.transport.settings import Settings

if TYPE_CHECKING:
    # Only with tracing on is OpenTelemetry imported (worker.ops.tracing).
    from worker.ops.otel import JobTracing, ProcessSpan

# The most CPU time a render may take on the event loop before it moves to the helper
# (never longer than the render deadline itself): far above a typical job's render,
# short enough that the jobs waiting behind it hardly notice.
EVENT_LOOP_SLICE = 0.5
# After the default reply queue could not be declared again (e.g. no configure
# permission), unroutable replies are dead-lettered for this long without trying again:
# each failed declaration closes the channel, and with it every job in flight on it.
REDECLARE_PAUSE = 30.0
DEBUG_PAYLOAD_CHARS = 4096


def delivery_count(message: DeliveredMessage) -> int:
    """How many times this job was handed out before without being settled.

    Quorum queues count it in `x-delivery-count`; elsewhere only the redelivered flag
    is known. A redelivered job counts as handed out before whatever the count says:
    from RabbitMQ 4.3 a quorum queue counts only explicit returns, so a job whose worker
    died under it comes back flagged but uncounted, and must still be taken as suspect
    (rendered in the helper process, where it cannot kill the worker again).
    """
    frame = message.delivery
    redelivered = 1 if isinstance(frame, Basic.Deliver) and frame.redelivered else 0
    value = (message.header.properties.headers or {}).get("x-delivery-count")
    if isinstance(value, int) and not isinstance(value, bool):
        return max(value, redelivered)
    return redelivered


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
    held: bool = False  # its reply was refused and held (`ReplyBackpressure`)


class DeliveryPath:
    """Handles each delivery of the worker's consumer, from bytes to settlement.

    `redeclare_reply_queue()` declares the default reply queue again (the link's job);
    `prefetch_changed()` runs when the byte policy wants another prefetch.
    """

    def __init__(
        self,
        settings: Settings,
        renderer: Renderer,
        metrics: Metrics,
        pool: RenderPool,
        flow: BrokerFlow,
        log: FilteringBoundLogger,
        *,
        backpressure: ReplyBackpressure,
        redeclare_reply_queue: Callable[[], Awaitable[None]],
        prefetch_changed: Callable[[], None],
        tracing: "JobTracing | None" = None,
        archive: ArchiveRecorder | None = None,
    ) -> None:
        self.settings = settings
        self.tracing = tracing
        self.archive = archive
        self.topology = settings.topology
        self.renderer = renderer
        self.metrics = metrics
        self.pool = pool
        self.flow = flow
        self.log = log
        self.backpressure = backpressure
        self.report = JobReport(metrics, log)
        self.slice = EventLoopSlice(min(EVENT_LOOP_SLICE, settings.render_timeout))
        self.budget = ByteBudget(settings.max_inflight_bytes)
        metrics.track_in_flight_bytes(lambda: self.budget.used, lambda: self.budget.peak)
        self.prefetch = PrefetchPolicy(settings.max_inflight_bytes, settings.prefetch)
        self._redeclare_reply_queue = redeclare_reply_queue
        self._prefetch_changed = prefetch_changed
        # Lowered when the broker refuses a reply as too large (reply_limit).
        self.reply_limit = BROKER_DEFAULT_MAX_MESSAGE_BYTES
        self.redeclare_after = 0.0  # time.monotonic() before which not to try again
        # Replies' message ids: unique per process (aiormq matches a returned reply
        # to its publish by message id) without a random UUID per reply.
        self._reply_ids = map(f"{uuid.uuid4().hex[:12]}-{{}}".format, itertools.count())
        # Set once the drain found nothing in flight and the connection is about to close.
        self.closing = False
        self.in_flight = 0
        self.idle = asyncio.Event()
        self.idle.set()

    def close(self) -> None:
        self.pool.close()
        self.slice.close()

    async def on_message(self, acks: BatchedAcks, message: DeliveredMessage) -> None:
        # A consumer only ever receives basic.deliver frames.
        tag = cast(int, cast(Basic.Deliver, message.delivery).delivery_tag)
        # Registered before anything else: no batched ack may cover a delivery that is
        # not settled, including one left for redelivery below.
        acks.register(tag)
        if self.flow.blocked:
            # The broker refuses the worker's publishes (a resource alarm): the reply
            # could not be sent, so the job waits here, neither rendered nor settled.
            await self.flow.admit()
        if self.backpressure.engaged:
            # The broker refuses the worker's replies: take no more work until one of
            # those held is confirmed.
            await self.backpressure.admit()
        if self.closing:
            # A delivery sent before the consumer was cancelled, reaching us after the
            # drain found the worker idle. Left unacknowledged, the broker hands it to
            # another worker when the connection closes. Answering it now could get the
            # reply out but not the ack, and the job would be answered twice.
            self.log.debug("delivery_left_for_redelivery", attempt=delivery_count(message))
            return
        received = time.perf_counter()
        self.in_flight += 1
        self.metrics.in_flight.inc()
        self.idle.clear()
        size = len(message.body)
        if self.prefetch.observe(size) is not None:
            self._prefetch_changed()
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
            if delivery.span is not None:
                delivery.span.failed(exc)
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
            self.in_flight -= 1
            self.metrics.in_flight.dec()
            if self.in_flight == 0:
                self.idle.set()

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
        if delivery.attempt and self.backpressure.orphans:
            # A job the broker took back while its refused reply was held: that reply
            # answers it, once confirmed.
            held = self.backpressure.claim(held_key(delivery.message))
            if held is not None and await self._answered_by(delivery, held):
                await self._conclude(delivery, Decision(held.outcome, "ack", False, held=True))
                return
        decision = await self._decide(delivery)
        if delivery.span is not None and decision.outcome is not None:
            delivery.span.rendered(decision.outcome)
        if decision.retry is not None:
            await self._conclude(delivery, decision)
            return
        decision = await self._publish(delivery, decision)
        await self._conclude(delivery, decision)

    async def _answered_by(self, delivery: Delivery, held: HeldReply) -> bool:
        """Wait for a claimed held reply: True once confirmed; False when it cannot be
        (the broker returned it as unroutable: the job is handled afresh)."""
        try:
            await self.backpressure.confirmed(held, delivery.message)
        except asyncio.CancelledError:
            raise
        except Exception:
            return False
        return True

    async def _decide(self, delivery: Delivery) -> Decision:
        """Render the job, here or in the helper process: the reply and how to settle."""
        body = delivery.message.body
        try:
            outcome, trace, offloaded = await self._render(body, delivery.attempt)
        except RenderProcessDied as exc:
            return self._retry_or_answer(
                delivery, Retry(f"render helper died: {exc}"), Failure.RENDER_PROCESS_DIED
            )
        except RenderTimedOut as exc:
            self.metrics.render_timeout("helper")
            return self._retry_or_answer(
                delivery, Retry(f"render helper killed: {exc}"), Failure.RENDER_TIMEOUT
            )
        except Exception as exc:  # a bug in the render path, outside the renderer's guard
            return self._retry_or_answer(
                delivery,
                Retry(f"render failed: {exc!r}", backoff=backoff(delivery.attempt)),
                Failure.HANDLER_BUG,
                error=exc,
            )
        return Decision(outcome, "ack" if outcome.ok else "dead_letter", offloaded, trace)

    def _retry_or_answer(
        self,
        delivery: Delivery,
        again: Retry,
        reason: Failure,
        error: BaseException | None = None,
    ) -> Decision:
        """Requeue a job that failed for want of a render; on the last delivery the
        queue allows, answer it with the render side's error reply for `reason` and
        dead-letter it instead, rather than let the broker dead-letter it unanswered."""
        trace = format_exception(error) if error is not None else None
        if delivery.attempt < self.topology.delivery_limit:
            return Decision(None, "requeue", offloaded=True, trace=trace, retry=again)
        outcome = failure_reply(
            reason,
            delivery.message.body,
            render_timeout=self.settings.render_timeout,
            error=error,
        )
        return Decision(outcome, "dead_letter", offloaded=True, trace=trace)

    async def _render(self, body: bytes, attempt: int) -> tuple[RenderOutcome, str | None, bool]:
        """The outcome, the trace of an internal error, and whether it was offloaded."""
        size = len(body)
        # Oversize bodies are refused without being parsed: cheap, so never offloaded.
        offload = size <= self.settings.max_message_bytes and (
            size > self.settings.offload_bytes or attempt > 0
        )
        if not offload:
            try:
                outcome = self.slice.run(self.renderer.render, body)
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
        if len(outcome.body) > self.reply_limit:
            # Refused by the broker it would close the channel, and come back again on
            # every delivery: answer with an error that fits, and keep the job.
            outcome = failure_reply(
                Failure.REPLY_TOO_LARGE,
                delivery.message.body,
                reply=outcome,
                limit_bytes=self.reply_limit,
            )
            decision = replace(decision, outcome=outcome, settle="dead_letter")
        reply_to = delivery.reply_to
        routing_key = reply_to or self.topology.reply_queue
        try:
            try:
                await self._send(outcome, delivery, routing_key)
            except PublishError:
                if reply_to is not None or time.monotonic() < self.redeclare_after:
                    raise
                # Our own reply queue was deleted under us: it is ours to declare (the
                # worker declared it at start-up), so declare it again and publish once
                # more; `PublishError` again means it cannot be had.
                try:
                    await self._redeclare_reply_queue()
                except Exception as exc:  # the second publish says what it means for the job
                    self.redeclare_after = time.monotonic() + REDECLARE_PAUSE
                    self.log.error(
                        "reply_queue_declare_failed",
                        error=repr(exc),
                        next_try_in_s=REDECLARE_PAUSE,
                    )
                await self._send(outcome, delivery, routing_key)
        except PublishError:
            return self._unroutable(decision, reply_to)
        except DeliveryError as exc:
            # Refused for the broker's reasons (a full reply queue with reject-publish,
            # a queue without a leader): backpressure, not the job's fault. The job is
            # held, unacknowledged, while the reply is published again until confirmed.
            self.log.warning(
                "reply_refused", job_id=outcome.job_id, attempt=delivery.attempt, error=str(exc)
            )
            held = self.backpressure.hold(
                exc, outcome, partial(self._send, outcome, delivery, routing_key)
            )
            try:
                await self.backpressure.confirmed(held, delivery.message)
            except PublishError:
                return self._unroutable(decision, reply_to)
            return replace(decision, held=True)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            limit = limit_from_refusal(exc)
            if limit is not None and limit < self.reply_limit:
                # The broker closed the channel over the reply's size: from now on such
                # replies are caught before publishing, this one on its redelivery.
                self.reply_limit = limit
                self.log.warning("broker_max_message_size", limit_bytes=limit)
            # Connection or channel trouble: the reply may or may not have reached the
            # broker. Not acknowledging means the job comes back after reconnecting.
            again = Retry(f"reply not confirmed: {exc!r}", settled="unsettled")
            return replace(decision, settle="requeue", retry=again)
        return decision

    def _unroutable(self, decision: Decision, reply_to: str | None) -> Decision:
        """The broker returned the reply: no queue takes it."""
        job_id = decision.outcome.job_id if decision.outcome is not None else None
        if reply_to is not None:
            # The RPC client's reply queue is gone (it timed out or exited): nobody can
            # ever read this reply. Settle the job as if answered; retrying would loop
            # until the delivery limit for nothing.
            self.log.warning("reply_unroutable", job_id=job_id, reply_to_gone=True)
            return decision
        # The default reply queue could not be declared again: keep the job, in the
        # dead-letter queue, instead of answering into the void.
        self.log.error("reply_unroutable", job_id=job_id, reply_queue=self.topology.reply_queue)
        return replace(decision, settle="dead_letter")

    async def _send(
        self,
        outcome: RenderOutcome,
        delivery: Delivery,
        routing_key: str,
        channel: AbstractChannel | None = None,
    ) -> None:
        """Publish the reply and wait for its confirm (raises as `basic_publish` does):
        on the channel the job came on, which is the worker's publishing channel, unless
        `channel` is another (a refused reply published again)."""
        request = delivery.message.header.properties
        properties = Basic.Properties(
            content_type="application/json",
            delivery_mode=2,  # persistent
            correlation_id=request.correlation_id or outcome.job_id or request.message_id,
            message_id=next(self._reply_ids),
        )
        # Each publish is a span of the job's trace; the reply names it as its parent.
        sent = None if delivery.span is None else delivery.span.send(routing_key)
        if sent is not None:
            properties.headers = dict(sent.headers)
        publishing = channel if channel is not None else delivery.message.channel
        try:
            # aiormq writes the reply and waits for the socket to take it (a broker that
            # stops reading holds the publisher here, not in memory), then for the
            # broker's confirm; a return raises `PublishError` (`on_return_raises`).
            await publishing.basic_publish(
                outcome.body,
                routing_key=routing_key,
                properties=properties,
                mandatory=True,
            )
        except BaseException as exc:
            if sent is not None:
                sent.end(exc)
            raise
        if sent is not None:
            sent.end()

    async def _conclude(self, delivery: Delivery, decision: Decision) -> None:
        """Settle the job, then count and log it: one log line per delivery."""
        retry = decision.retry
        if retry is not None:
            # Logged first, so that the line's duration is the job's, not the backoff's.
            self.report.log_job(delivery, decision, retry.settled)
            if retry.backoff:
                await asyncio.sleep(retry.backoff)
            await self._settle(delivery, "requeue")
            return
        assert decision.outcome is not None
        if self.archive is not None:
            # The answered job's record, confirmed or counted lost within the archive's
            # confirm timeout (worker.archive.recorder): never raises, never requeues.
            await self.archive.record(decision.outcome)
        settled = await self._settle(delivery, decision.settle)
        trace_id = None if delivery.span is None else delivery.span.trace_id
        self.report.record(
            decision.outcome, len(delivery.message.body), delivery.received, trace_id
        )
        self.report.log_job(delivery, decision, settled)

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


class JobReport:
    """What one delivery leaves behind: its metrics and its one log line."""

    def __init__(self, metrics: Metrics, log: FilteringBoundLogger) -> None:
        self.metrics = metrics
        self.log = log

    def record(
        self,
        outcome: RenderOutcome,
        request_bytes: int,
        received: float,
        trace_id: str | None = None,
    ) -> None:
        """Count one answered job; `trace_id` (a sampled trace) becomes the exemplar."""
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

    def log_job(self, delivery: Delivery, decision: Decision, settled: str) -> None:
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
        if decision.held:
            fields["reply_held"] = True  # refused by the broker, published again
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
        if outcome is not None and outcome.internal_error:
            self.log.error("job", **fields)
        elif outcome is None or not outcome.ok or settled not in ("acked",):
            self.log.warning("job", **fields)
        else:
            self.log.info("job", **fields)
