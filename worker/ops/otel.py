"""OpenTelemetry spans of the jobs the worker handles (imported only with tracing on).

One trace runs from the producer to the LLM caller: a job's W3C `traceparent` and
`tracestate` AMQP headers are the parent of the worker's *process* span; its render
phases (decode, mask, validate, build, budget) are child spans made afterwards from the
times the renderer recorded (it may have run in a helper process); the reply's *send*
span, a child of the process span, is what the reply's own `traceparent` header names,
so the LLM caller's span joins the trace. Names and attributes follow OpenTelemetry's
messaging semantic conventions for RabbitMQ. No payload text ever goes into a span.

Spans leave through a bounded queue drained by one thread: when the receiver is down or
slow the queue fills and further spans are dropped and counted, never waited for.
"""

import collections
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from worker.errors import ConfigError
from worker.ops.tracing import DEFAULT_SERVICE_NAME

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
SYSTEM = "rabbitmq"
# A phase: its name and its start and end on the perf_counter clock, in seconds.
Phase = tuple[str, float, float]

_PROPAGATOR = TraceContextTextMapPropagator()


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """The bounded export queue's limits, from the standard `OTEL_BSP_*` variables."""

    max_queue_size: int = 2048
    schedule_delay_s: float = 5.0
    max_export_batch_size: int = 512

    # The SDK's defaults for OTEL_BSP_* (the schedule delay in milliseconds).
    DEFAULTS: ClassVar[dict[str, float]] = {
        "OTEL_BSP_MAX_QUEUE_SIZE": 2048,
        "OTEL_BSP_SCHEDULE_DELAY": 5000,
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": 512,
    }

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> "QueueSettings":
        def number(name: str) -> float:
            raw = environ.get(name, "").strip()
            if not raw:
                return cls.DEFAULTS[name]
            try:
                value = float(raw)
            except ValueError:
                raise ConfigError(f"{name} must be a number, not {raw!r}") from None
            if value <= 0:
                raise ConfigError(f"{name} must be above 0, not {raw!r}")
            return value

        return cls(
            max_queue_size=int(number("OTEL_BSP_MAX_QUEUE_SIZE")),
            schedule_delay_s=number("OTEL_BSP_SCHEDULE_DELAY") / 1000,
            max_export_batch_size=int(number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE")),
        )


class DroppingExportQueue(SpanProcessor):
    """Ended spans wait in a bounded queue for one exporting thread; a full queue drops
    the span and says so through `on_dropped(1)`, so that a receiver that is down costs
    the worker nothing but the spans."""

    def __init__(
        self,
        exporter: SpanExporter,
        settings: QueueSettings,
        on_dropped: Callable[[int], None] | None = None,
    ) -> None:
        self.exporter = exporter
        self.settings = settings
        self.on_dropped = on_dropped
        self.dropped = 0
        self.spans: collections.deque[ReadableSpan] = collections.deque()
        self.wake = threading.Event()
        self.stopping = False
        self.thread = threading.Thread(target=self.export_loop, name="otel-export", daemon=True)
        self.thread.start()

    def on_start(self, span: Any, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is None or not span.context.trace_flags.sampled:
            return
        if len(self.spans) >= self.settings.max_queue_size:
            self.dropped += 1
            if self.on_dropped is not None:
                self.on_dropped(1)
            return
        self.spans.append(span)
        if len(self.spans) >= self.settings.max_export_batch_size:
            self.wake.set()

    def export_loop(self) -> None:
        while not self.stopping:
            self.wake.wait(self.settings.schedule_delay_s)
            self.wake.clear()
            self.export_waiting()
        self.export_waiting()

    def export_waiting(self) -> None:
        while self.spans:
            batch: list[ReadableSpan] = []
            while self.spans and len(batch) < self.settings.max_export_batch_size:
                batch.append(self.spans.popleft())
            try:
                self.exporter.export(batch)
            except Exception:  # the receiver's trouble must never reach the worker
                self.dropped += len(batch)
                if self.on_dropped is not None:
                    self.on_dropped(len(batch))

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self.export_waiting()
        return True

    def shutdown(self) -> None:
        self.stopping = True
        self.wake.set()
        self.thread.join(timeout=self.settings.schedule_delay_s + 5)
        self.exporter.shutdown()


def make_exporter(environ: Mapping[str, str]) -> SpanExporter:
    """The exporter `OTEL_TRACES_EXPORTER` names (default `otlp`), with the protocol
    `OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL` names: `http/protobuf`, the one the `otel`
    extra installs (every OTLP receiver takes it; grpc would add grpcio to the image)."""
    name = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() or "otlp"
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if name != "otlp":
        raise ConfigError(f"OTEL_TRACES_EXPORTER={name!r}: the worker exports otlp or console")
    protocol = (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    raise ConfigError(
        f"OTLP protocol {protocol!r}: the worker exports http/protobuf "
        "(set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf)"
    )


def make_resource(environ: Mapping[str, str]) -> Resource:
    """`OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` as the SDK reads them, with the
    worker's own name when neither names the service."""
    named = environ.get("OTEL_SERVICE_NAME") or "service.name=" in environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    )
    return Resource.create({} if named else {SERVICE_NAME: DEFAULT_SERVICE_NAME})


class JobTracing:
    """Makes the spans of the jobs one worker process handles."""

    def __init__(self, provider: TracerProvider, log_ignored: Callable[[str], None]) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("worker")
        self.log_ignored = log_ignored

    @classmethod
    def from_environment(
        cls,
        environ: Mapping[str, str] | None = None,
        on_dropped: Callable[[int], None] | None = None,
        log_ignored: Callable[[str], None] = lambda _: None,
        exporter: SpanExporter | None = None,
    ) -> "JobTracing":
        environ = os.environ if environ is None else environ
        # The sampler is the SDK's own reading of OTEL_TRACES_SAMPLER(_ARG).
        provider = TracerProvider(resource=make_resource(environ))
        queue = DroppingExportQueue(
            exporter if exporter is not None else make_exporter(environ),
            QueueSettings.from_environment(environ),
            on_dropped,
        )
        provider.add_span_processor(queue)
        return cls(provider, log_ignored)

    def shutdown(self) -> None:
        self.provider.shutdown()

    def parent(self, headers: Mapping[str, Any] | None) -> Context | None:
        """The producer's context in a job's headers; None (a new trace) when there is
        none, or when it is malformed (with one debug line, never an error)."""
        if not headers or TRACEPARENT not in headers:
            return None
        carrier = {
            key: value.decode("latin-1") if isinstance(value, bytes) else value
            for key in (TRACEPARENT, TRACESTATE)
            if isinstance(value := headers.get(key), str | bytes)
        }
        context = _PROPAGATOR.extract(carrier)
        if not trace.get_current_span(context).get_span_context().is_valid:
            self.log_ignored(str(carrier.get(TRACEPARENT, ""))[:80])
            return None
        return context

    def process(
        self,
        headers: Mapping[str, Any] | None,
        *,
        queue: str,
        message_id: str | None,
        correlation_id: str | None,
        delivery_tag: int,
        redelivered: bool,
        body_size: int,
    ) -> "ProcessSpan":
        """Start the process span of one delivery."""
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": "",  # the default exchange
            "messaging.rabbitmq.destination.routing_key": queue,
            "messaging.consumer.group.name": queue,
            "messaging.rabbitmq.message.delivery_tag": delivery_tag,
            "messaging.message.body.size": body_size,
            "messaging.rabbitmq.message.redelivered": redelivered,
        }
        if message_id:
            attributes["messaging.message.id"] = message_id
        if correlation_id:
            attributes["messaging.message.conversation_id"] = correlation_id
        span = self.tracer.start_span(
            f"process {queue}",
            context=self.parent(headers),
            kind=SpanKind.CONSUMER,
            attributes=attributes,
        )
        return ProcessSpan(self.tracer, span)


def outcome_attributes(
    *,
    status: str,
    job_id: str | None,
    kind: str | None,
    family: str | None,
    template_version: str | None,
    error_code: str | None,
    masked: Mapping[str, int],
    trimmed: bool,
    tokens_left_out: int,
) -> dict[str, Any]:
    """What a process span says of a job's outcome: never payload text."""
    attributes: dict[str, Any] = {"prompt_worker.status": status}
    for key, value in (
        ("prompt_worker.job_id", job_id),
        ("prompt_worker.kind", kind),
        ("prompt_worker.family", family),
        ("prompt_worker.template_version", template_version),
        ("error.type", error_code),
    ):
        if value:
            attributes[key] = value
    for detector, count in masked.items():
        attributes[f"prompt_worker.masked.{detector}"] = count
    attributes["prompt_worker.masked_total"] = sum(masked.values())
    attributes["prompt_worker.budget.trimmed"] = trimmed
    attributes["prompt_worker.budget.tokens_left_out"] = tokens_left_out
    return attributes


class ProcessSpan:
    """The process span of one delivery and the children made under it."""

    __slots__ = ("span", "tracer")

    def __init__(self, tracer: trace.Tracer, span: Span) -> None:
        self.tracer = tracer
        self.span = span

    @property
    def trace_id(self) -> str | None:
        """The trace id in hex when the span is sampled (a metric's exemplar)."""
        context = self.span.get_span_context()
        return format(context.trace_id, "032x") if context.trace_flags.sampled else None

    def phases(self, phases: Sequence[Phase]) -> None:
        """Child spans of phases timed on the perf_counter clock (any process)."""
        if not phases or not self.span.is_recording():
            return
        offset = time.time_ns() - time.perf_counter_ns()
        parent = trace.set_span_in_context(self.span)
        for name, started, ended in phases:
            child = self.tracer.start_span(
                name, context=parent, start_time=offset + int(started * 1e9)
            )
            child.end(end_time=offset + int(ended * 1e9))

    def outcome(self, attributes: Mapping[str, Any], error: bool) -> None:
        if not self.span.is_recording():
            return
        self.span.set_attributes(attributes)
        if error:
            self.span.set_status(Status(StatusCode.ERROR))

    def rendered(
        self,
        *,
        status: str,
        job_id: str | None,
        kind: str | None,
        family: str | None,
        template_version: str | None,
        error_code: str | None,
        masked: Mapping[str, int],
        trimmed: bool,
        tokens_left_out: int,
        phases: Sequence[Phase],
    ) -> None:
        """What the render made of the job: its phases and outcome."""
        if not self.span.is_recording():
            return
        self.phases(phases)
        self.outcome(
            outcome_attributes(
                status=status,
                job_id=job_id,
                kind=kind,
                family=family,
                template_version=template_version,
                error_code=error_code,
                masked=masked,
                trimmed=trimmed,
                tokens_left_out=tokens_left_out,
            ),
            error=status != "ok",
        )

    def send(self, routing_key: str) -> "SendSpan":
        """Start the reply's send span; its context goes into the reply's headers."""
        return SendSpan(self._send_span(routing_key))

    def _send_span(self, routing_key: str) -> Span:
        return self.tracer.start_span(
            f"send {routing_key}",
            context=trace.set_span_in_context(self.span),
            kind=SpanKind.PRODUCER,
            attributes={
                "messaging.system": SYSTEM,
                "messaging.operation.type": "send",
                "messaging.operation.name": "publish",
                "messaging.destination.name": "",
                "messaging.rabbitmq.destination.routing_key": routing_key,
            },
        )

    def end(self) -> None:
        self.span.end()


class SendSpan:
    """The span of publishing a reply, up to the broker's confirm."""

    __slots__ = ("headers", "span")

    def __init__(self, span: Span) -> None:
        self.span = span
        # The reply's traceparent: the LLM caller's span becomes this span's child.
        self.headers = context_headers(span)

    def end(self, error: BaseException | None = None) -> None:
        if error is not None and self.span.is_recording():
            self.span.set_status(Status(StatusCode.ERROR, type(error).__name__))
        self.span.end()


def context_headers(span: Span) -> dict[str, str]:
    """The `traceparent`/`tracestate` headers that make `span` the parent of the
    receiver's span. An unsampled span propagates too: its flags tell the receiver not
    to sample either, so one trace is kept or dropped whole."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, trace.set_span_in_context(span))
    return carrier
