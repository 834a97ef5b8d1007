"""OpenTelemetry spans of the jobs the worker handles, on the SDK (imported only with
tracing on: worker.ops.tracing decides).

One trace runs from the producer to the LLM caller: the context a job's AMQP headers
carry (W3C `traceparent`, or whatever `OTEL_PROPAGATORS` names) is the parent of the
worker's *process* span; its render phases (decode, mask, validate, build, budget) are
events of it, at the times the renderer recorded (it may have run in a helper process:
events cost a sampled job a quarter less than child spans, docs/TRACING.md, "What it
costs"); the reply's *send* span, a child of the process span, is what the context
injected into the reply's headers names, so the LLM caller's span joins the trace.
Names and attributes follow OpenTelemetry's messaging semantic conventions for
RabbitMQ. No payload text ever goes into a span.

Everything is the SDK's, configured as the SDK configures itself from `OTEL_*`: the
exporters are the `opentelemetry_traces_exporter` entry points `OTEL_TRACES_EXPORTER`
names (`otlp` over the protocol of `OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL`, `console`,
several at once), each built by its own constructor, which reads its endpoint, headers,
timeout, compression, certificates and retry from the environment; each one has a
`BatchSpanProcessor` (`OTEL_BSP_*`); the sampler is the `opentelemetry_traces_sampler`
entry point `OTEL_TRACES_SAMPLER` names; the resource is `Resource.create()`'s
(`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`); span limits are `OTEL_SPAN_*` and
`OTEL_ATTRIBUTE_*`'s.

Spans the SDK could not deliver (its export queue full, or an export that failed after
the exporter's own retries) are counted through the SDK's own metrics of itself
(`otel.sdk.processor.span.processed` and `otel.sdk.exporter.span.exported` with an
`error.type`), which a `MeterProvider` of the worker's hands to `on_dropped`.
"""

import inspect
import os
import time
from collections.abc import Callable, Mapping, Sequence
from importlib.metadata import entry_points
from typing import Any, Protocol

from opentelemetry import propagate
from opentelemetry.context import Context
from opentelemetry.metrics import Counter, Meter, NoOpCounter, NoOpMeter, NoOpMeterProvider
from opentelemetry.propagators.textmap import Getter
from opentelemetry.sdk.environment_variables import OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED
from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import Sampler
from opentelemetry.trace import (
    Span,
    SpanKind,
    Status,
    StatusCode,
    Tracer,
    get_current_span,
    set_span_in_context,
)
from opentelemetry.util.types import Attributes

from worker import __version__
from worker.errors import ConfigError

DEFAULT_SERVICE_NAME = "build-prompt-worker"
TRACEPARENT = "traceparent"
SYSTEM = "rabbitmq"
# The OpenTelemetry specification's default; the Python SDK's own autoconfiguration
# would take gRPC, which an `OTEL_EXPORTER_OTLP_ENDPOINT` at :4318 does not speak.
DEFAULT_PROTOCOL = "http/protobuf"
EXPORTER_BY_PROTOCOL = {"grpc": "otlp_proto_grpc", "http/protobuf": "otlp_proto_http"}
RATIO_SAMPLERS = ("traceidratio", "parentbased_traceidratio")
# A phase: its name and its start and end on the perf_counter clock, in seconds.
Phase = tuple[str, float, float]
# The SDK's metrics of itself that count spans lost: `error.type` says why.
LOST_SPAN_COUNTERS = frozenset(
    {"otel.sdk.processor.span.processed", "otel.sdk.exporter.span.exported"}
)


# -- the AMQP headers a context travels in -----------------------------------------


class AmqpHeaders(Getter[Mapping[str, Any]]):
    """Reads a propagator's fields from a message's headers: AMQP strings may arrive as
    bytes (a long string the client did not decode)."""

    def get(self, carrier: Mapping[str, Any], key: str) -> list[str] | None:
        value = carrier.get(key)
        if isinstance(value, bytes):
            return [value.decode("latin-1")]
        if isinstance(value, str):
            return [value]
        return None

    def keys(self, carrier: Mapping[str, Any]) -> list[str]:
        return [str(key) for key in carrier]


AMQP_HEADERS = AmqpHeaders()


# -- configuration, the SDK's way --------------------------------------------------


def _entry_point(group: str, name: str) -> Any | None:
    """What entry point `name` of `group` names; None when none is installed."""
    found = entry_points(group=group, name=name)
    if not found:
        return None
    try:
        return next(iter(found)).load()
    except Exception as exc:  # installed, but its package fails to import (a grpc wheel)
        raise ConfigError(f"{group} {name!r} cannot be loaded: {exc!r}") from None


def _entry_point_names(group: str) -> list[str]:
    return sorted(point.name for point in entry_points(group=group))


def exporter_names(environ: Mapping[str, str]) -> list[str]:
    """The exporter entry points `OTEL_TRACES_EXPORTER` names (default `otlp`), `otlp`
    resolved by the OTLP protocol variables."""
    listed = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() or "otlp"
    names = []
    for name in (item.strip() for item in listed.split(",")):
        if not name or name == "none":
            continue
        if name == "otlp":
            protocol = (
                environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "").strip()
                or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "").strip()
                or DEFAULT_PROTOCOL
            )
            if protocol not in EXPORTER_BY_PROTOCOL:
                raise ConfigError(
                    f"OTLP protocol {protocol!r}: use one of {', '.join(EXPORTER_BY_PROTOCOL)}"
                )
            name = EXPORTER_BY_PROTOCOL[protocol]
        names.append(name)
    return names


def make_exporter(name: str, meter_provider: NoOpMeterProvider) -> SpanExporter:
    """The exporter of entry point `name`, built by its own constructor from the
    environment (and told where to count its failed exports, when it can)."""
    exporter_class = _entry_point("opentelemetry_traces_exporter", name)
    if exporter_class is None:
        available = ", ".join(_entry_point_names("opentelemetry_traces_exporter"))
        raise ConfigError(
            f"OTEL_TRACES_EXPORTER: no trace exporter {name!r} is installed "
            f"(installed: {available}; the otel extra has otlp over grpc and http/protobuf)"
        )
    if not (isinstance(exporter_class, type) and issubclass(exporter_class, SpanExporter)):
        raise ConfigError(f"OTEL_TRACES_EXPORTER: {name!r} is not a trace exporter")
    arguments: dict[str, Any] = {}
    if "meter_provider" in inspect.signature(exporter_class).parameters:
        arguments["meter_provider"] = meter_provider
    try:
        return exporter_class(**arguments)
    except Exception as exc:  # a setting its constructor refused: a compression, a file
        raise ConfigError(f"the {name} trace exporter: {exc}") from None


def make_sampler(environ: Mapping[str, str]) -> Sampler:
    """The sampler of entry point `OTEL_TRACES_SAMPLER` (default parentbased_always_on),
    given `OTEL_TRACES_SAMPLER_ARG`. Unlike the SDK, which warns and samples every trace,
    a name or ratio it cannot follow stops the worker: a typo must not cost a sampled
    trace per job."""
    name = environ.get("OTEL_TRACES_SAMPLER", "").strip().lower() or "parentbased_always_on"
    factory = _entry_point("opentelemetry_traces_sampler", name)
    if factory is None:
        available = ", ".join(_entry_point_names("opentelemetry_traces_sampler"))
        raise ConfigError(f"OTEL_TRACES_SAMPLER={name!r}: use one of {available}")
    raw = environ.get("OTEL_TRACES_SAMPLER_ARG", "").strip()
    argument: Any = raw or None
    if name in RATIO_SAMPLERS:
        try:
            argument = float(raw or "1.0")
        except ValueError:
            argument = -1.0
        if not 0.0 <= argument <= 1.0:
            raise ConfigError(f"OTEL_TRACES_SAMPLER_ARG must be a ratio from 0 to 1, not {raw!r}")
    try:
        sampler = factory(argument)
    except Exception as exc:  # a sampler of another package refusing its argument
        raise ConfigError(f"OTEL_TRACES_SAMPLER={name!r}: {exc}") from None
    if not isinstance(sampler, Sampler):
        raise ConfigError(f"OTEL_TRACES_SAMPLER={name!r} is not a sampler")
    return sampler


def make_resource() -> Resource:
    """The SDK's resource (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`), named and
    versioned as the worker where those do not say otherwise."""
    resource = Resource.create()
    defaults: dict[str, str] = {}
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        defaults[SERVICE_NAME] = DEFAULT_SERVICE_NAME
    if SERVICE_VERSION not in resource.attributes:
        defaults[SERVICE_VERSION] = __version__
    return resource.merge(Resource(defaults)) if defaults else resource


class LostSpans(NoOpMeterProvider):
    """A MeterProvider that only listens to the SDK's counts of spans it lost (a full
    queue, a failed export) and tells `on_dropped`; every other instrument is a no-op."""

    def __init__(self, on_dropped: Callable[[int], None] | None) -> None:
        self.on_dropped = on_dropped

    def get_meter(
        self,
        name: str,
        version: str | None = None,
        schema_url: str | None = None,
        attributes: Attributes = None,
    ) -> Meter:
        return _LostSpansMeter(self.on_dropped, name, version=version, schema_url=schema_url)


class _LostSpansMeter(NoOpMeter):
    def __init__(
        self,
        on_dropped: Callable[[int], None] | None,
        name: str,
        version: str | None = None,
        schema_url: str | None = None,
    ) -> None:
        super().__init__(name, version=version, schema_url=schema_url)
        self.on_dropped = on_dropped

    def create_counter(self, name: str, unit: str = "", description: str = "") -> Counter:
        if name in LOST_SPAN_COUNTERS and self.on_dropped is not None:
            return _LostSpansCounter(self.on_dropped, name, unit=unit, description=description)
        return NoOpCounter(name, unit=unit, description=description)


class _LostSpansCounter(NoOpCounter):
    def __init__(
        self, on_dropped: Callable[[int], None], name: str, unit: str = "", description: str = ""
    ) -> None:
        super().__init__(name, unit=unit, description=description)
        self.on_dropped = on_dropped

    def add(
        self, amount: float, attributes: Attributes = None, context: Context | None = None
    ) -> None:
        # Counted spans without an error.type were handed to the exporter or delivered.
        if attributes and "error.type" in attributes and amount > 0:
            self.on_dropped(int(amount))


def make_provider(
    environ: Mapping[str, str],
    on_dropped: Callable[[int], None] | None = None,
    exporters: Sequence[SpanExporter] | None = None,
) -> tuple[TracerProvider, Tracer]:
    """The TracerProvider the environment asks for (its sampler, resource, and one
    BatchSpanProcessor per exporter; `exporters` stands in for the environment's), and
    the worker's tracer."""
    provider = TracerProvider(
        sampler=make_sampler(environ), resource=make_resource(), shutdown_on_exit=False
    )
    # Made before the SDK's metrics of itself are switched on below, so that its spans
    # do not count themselves (a few µs a span that nothing would read).
    tracer = provider.get_tracer("build-prompt-worker", __version__)
    # The SDK counts the spans it loses only with its metrics of itself on; its queue
    # and exporters read the switch when they are built. An explicit "false" stays.
    os.environ.setdefault(OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED, "true")
    lost = LostSpans(on_dropped)
    if exporters is None:
        exporters = [make_exporter(name, lost) for name in exporter_names(environ)]
    for exporter in exporters:
        try:
            processor = BatchSpanProcessor(exporter, meter_provider=lost)
        except ValueError as exc:  # an OTEL_BSP_* value out of range
            raise ConfigError(f"OTEL_BSP_*: {exc}") from None
        provider.add_span_processor(processor)
    return provider, tracer


# -- the spans of a job ------------------------------------------------------------


class Rendered(Protocol):
    """What a render tells the trace (worker.render.replies.RenderOutcome has it all;
    this layer sits below render and does not import it)."""

    @property
    def status(self) -> str: ...
    @property
    def job_id(self) -> str | None: ...
    @property
    def kind(self) -> str | None: ...
    @property
    def family(self) -> str | None: ...
    @property
    def template_version(self) -> str | None: ...
    @property
    def error_code(self) -> str | None: ...
    @property
    def masked(self) -> Mapping[str, int]: ...
    @property
    def trimmed(self) -> bool: ...
    @property
    def tokens_left_out(self) -> int: ...
    @property
    def phases(self) -> Sequence[Phase]: ...
    @property
    def exception(self) -> BaseException | None: ...


def outcome_attributes(outcome: Rendered) -> dict[str, Any]:
    """What a process span says of a job's outcome: never payload text."""
    attributes: dict[str, Any] = {"prompt_worker.status": outcome.status}
    for key, value in (
        ("prompt_worker.job_id", outcome.job_id),
        ("prompt_worker.kind", outcome.kind),
        ("prompt_worker.family", outcome.family),
        ("prompt_worker.template_version", outcome.template_version),
        ("error.type", outcome.error_code),
    ):
        if value:
            attributes[key] = value
    masked = outcome.masked
    for detector, count in masked.items():
        attributes[f"prompt_worker.masked.{detector}"] = count
    attributes["prompt_worker.masked_total"] = sum(masked.values()) if masked else 0
    attributes["prompt_worker.budget.trimmed"] = outcome.trimmed
    attributes["prompt_worker.budget.tokens_left_out"] = outcome.tokens_left_out
    return attributes


def record_error(span: Span, error: BaseException) -> None:
    """An exception event and an error status on a sampled span."""
    if span.is_recording():
        span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, type(error).__name__))


class JobTracing:
    """Makes the spans of the jobs one worker process handles."""

    def __init__(
        self,
        provider: TracerProvider,
        tracer: Tracer,
        log_ignored: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.provider = provider
        self.tracer = tracer
        # `OTEL_PROPAGATORS`' (read when opentelemetry.propagate was first imported).
        self.propagator = propagate.get_global_textmap()
        self.reads_traceparent = TRACEPARENT in self.propagator.fields
        self.log_ignored = log_ignored
        # What a span says of where it takes or sends messages: by operation and queue.
        self._places: dict[tuple[str, str], dict[str, Any]] = {}

    @classmethod
    def from_environment(
        cls,
        environ: Mapping[str, str],
        on_dropped: Callable[[int], None] | None = None,
        log_ignored: Callable[[str], None] = lambda _: None,
        exporters: Sequence[SpanExporter] | None = None,
    ) -> "JobTracing":
        provider, tracer = make_provider(environ, on_dropped, exporters)
        return cls(provider, tracer, log_ignored)

    def shutdown(self) -> None:
        """Export what is queued (each exporter within its own timeout) and stop."""
        self.provider.shutdown()

    def extract(self, headers: Mapping[str, Any] | None) -> Context | None:
        """The context a job's headers carry (None: a new trace). A `traceparent` the
        propagators could not read is told to `log_ignored` (a new trace begins)."""
        if not headers:
            return None
        context = self.propagator.extract(headers, getter=AMQP_HEADERS)
        if self.reads_traceparent:
            traceparent = AMQP_HEADERS.get(headers, TRACEPARENT)
            if traceparent and not get_current_span(context).get_span_context().is_valid:
                self.log_ignored(traceparent[0][:80])
        return context

    def inject(self, span: Span, context: Context | None) -> dict[str, str]:
        """The headers that carry `span`'s context (and the rest of `context`: baggage)."""
        headers: dict[str, str] = {}
        self.propagator.inject(headers, context=set_span_in_context(span, context))
        return headers

    def send(self, routing_key: str, headers: Mapping[str, Any] | None = None) -> "SendSpan":
        """A producer's span for publishing a job to `routing_key`: the child of the
        context in `headers` (a dead letter's, say), else a new trace's root."""
        context = self.extract(headers)
        span = self.start("send", routing_key, context)
        return SendSpan(span, self.inject(span, context))

    def start(self, operation: str, routing_key: str, context: Context | None) -> Span:
        """A `process` (consumer) or `send` (producer) span on a queue, the child of
        `context`: recording, or not, as the sampler decides."""
        return self.tracer.start_span(
            f"{operation} {routing_key}",
            context=context,
            kind=SpanKind.CONSUMER if operation == "process" else SpanKind.PRODUCER,
            attributes=self.place(operation, routing_key),
        )

    def place(self, operation: str, routing_key: str) -> dict[str, Any]:
        """What a `process` or `send` span says of the queue it takes from or publishes
        to, through the default exchange (OpenTelemetry's semantic conventions for
        RabbitMQ); made once a queue."""
        attributes = self._places.get((operation, routing_key))
        if attributes is None:
            attributes = {
                "messaging.system": SYSTEM,
                "messaging.operation.type": operation,
                "messaging.operation.name": "publish" if operation == "send" else operation,
                "messaging.destination.name": "",  # the default exchange
                "messaging.rabbitmq.destination.routing_key": routing_key,
            }
            if operation == "process":
                attributes["messaging.consumer.group.name"] = routing_key
            self._places[(operation, routing_key)] = attributes
        return attributes

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
        """Start the process span of one delivery. Unsampled, it only keeps the trace's
        context, for the reply."""
        context = self.extract(headers)
        span = self.start("process", queue, context)
        if span.is_recording():
            delivery: dict[str, Any] = {
                "messaging.rabbitmq.message.delivery_tag": delivery_tag,
                "messaging.message.body.size": body_size,
                "messaging.rabbitmq.message.redelivered": redelivered,
            }
            if message_id:
                delivery["messaging.message.id"] = message_id
            if correlation_id:
                delivery["messaging.message.conversation_id"] = correlation_id
            span.set_attributes(delivery)
        return ProcessSpan(self, span, context)


class ProcessSpan:
    """The process span of one delivery and what is made under it; what is not sampled
    is never recorded, but its context still travels on with the reply."""

    __slots__ = ("parent", "recording", "span", "tracing")

    def __init__(self, tracing: JobTracing, span: Span, parent: Context | None) -> None:
        self.tracing = tracing
        self.span = span
        self.parent = parent  # the job's own context: baggage travels on with the reply
        self.recording = span.is_recording()

    @property
    def trace_id(self) -> str | None:
        """The trace id in hex when the span is sampled (a metric's exemplar)."""
        if not self.recording:
            return None
        span_context = self.span.get_span_context()
        if not span_context.trace_flags.sampled:
            return None
        return format(span_context.trace_id, "032x")

    def rendered(self, outcome: Rendered) -> None:
        """What the render made of the job: its outcome, and its phases as events (when
        each began, and its length)."""
        if not self.recording:
            return
        span = self.span
        span.set_attributes(outcome_attributes(outcome))
        if outcome.exception is not None:
            span.record_exception(outcome.exception)
        if outcome.status != "ok":
            span.set_status(Status(StatusCode.ERROR, outcome.error_code))
        if outcome.phases:
            offset = time.time_ns() - time.perf_counter_ns()
            for name, started, finished in outcome.phases:
                span.add_event(
                    name,
                    {"prompt_worker.phase.duration_s": finished - started},
                    offset + int(started * 1e9),
                )

    def send(self, routing_key: str) -> "SendSpan":
        """Start the reply's send span; its context goes into the reply's headers. An
        unsampled job makes none: its reply carries the process span's context, marked
        not sampled, which is all a span that is never recorded would have said."""
        tracing = self.tracing
        if not self.recording:
            return SendSpan(self.span, tracing.inject(self.span, self.parent), own=False)
        span = tracing.start("send", routing_key, set_span_in_context(self.span, self.parent))
        return SendSpan(span, tracing.inject(span, self.parent))

    def failed(self, error: BaseException) -> None:
        """The delivery's handling failed: the exception goes on the span."""
        record_error(self.span, error)

    def end(self) -> None:
        self.span.end()


class SendSpan:
    """The span of publishing a message (a reply, or a producer's job), up to the
    broker's confirm; `headers` carry its context (an unsampled one travels too: its
    flags tell the receiver not to sample either)."""

    __slots__ = ("headers", "own", "span")

    def __init__(self, span: Span, headers: dict[str, str], own: bool = True) -> None:
        self.span = span
        self.headers = headers
        self.own = own  # False: the unsampled process span's context, not a span of its own

    def end(self, error: BaseException | None = None) -> None:
        if not self.own:
            return
        if error is not None:
            record_error(self.span, error)
        self.span.end()
