"""OpenTelemetry spans of the jobs the worker handles (imported only with tracing on).

One trace runs from the producer to the LLM caller: a job's W3C `traceparent` and
`tracestate` AMQP headers are the parent of the worker's *process* span; its render
phases (decode, mask, validate, build, budget) are child spans made from the times the
renderer recorded (it may have run in a helper process); the reply's *send* span, a
child of the process span, is what the reply's own `traceparent` header names, so the
LLM caller's span joins the trace. Names and attributes follow OpenTelemetry's
messaging semantic conventions for RabbitMQ. No payload text ever goes into a span.

Why not the SDK's spans and exporter: a job costs the worker a few hundred microseconds
of CPU, and the SDK's span objects and OTLP encoder cost more than that again for the
seven spans of one job (bench/bench_side_by_side.py --setting tracing). So a job's spans
are plain records, made on the event loop at the price of a few random numbers, and
encoded as OTLP protobuf (opentelemetry-proto's schema, written field by field) by one
export thread that posts them over OTLP/HTTP. The standard variables mean what they
mean to the SDK: the sampler (`OTEL_TRACES_SAMPLER[_ARG]`, with the SDK's ratio bound),
the resource (the SDK's own `Resource.create`: `OTEL_SERVICE_NAME`,
`OTEL_RESOURCE_ATTRIBUTES`), the endpoint, headers, timeout, compression and CA file of
`OTEL_EXPORTER_OTLP_[TRACES_]*`, and the export queue's `OTEL_BSP_*` limits.

Spans leave through a bounded queue: when the receiver is down or slow the queue
fills and further spans are dropped and counted, never waited for.
"""

import collections
import gzip
import http.client
import random
import ssl
import struct
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace.sampling import TraceIdRatioBased

from worker import __version__
from worker.errors import ConfigError

DEFAULT_SERVICE_NAME = "build-prompt-worker"
TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
SYSTEM = "rabbitmq"
# A phase: its name and its start and end on the perf_counter clock, in seconds.
Phase = tuple[str, float, float]
# OTLP's SpanKind and StatusCode values.
INTERNAL, PRODUCER, CONSUMER = 1, 4, 5
UNSET, ERROR = 0, 2

_HEX = frozenset("0123456789abcdef")


# -- the W3C trace context ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Parent:
    """A producer's span, from a job's `traceparent` (and `tracestate`)."""

    trace_id: int
    span_id: int
    sampled: bool
    tracestate: str


def parse_traceparent(value: str, tracestate: str = "") -> Parent | None:
    """The parent a `traceparent` names, or None when it is malformed (W3C rules:
    version 00 has exactly four fields, ids are lowercase hex and not all zeros, and
    version ff is invalid)."""
    parts = value.strip().split("-")
    if len(parts) < 4:
        return None
    version, trace_hex, span_hex, flags = parts[:4]
    if (
        len(version) != 2
        or version == "ff"
        or (version == "00" and len(parts) != 4)
        or len(trace_hex) != 32
        or len(span_hex) != 16
        or len(flags) != 2
        or not _HEX.issuperset(version + trace_hex + span_hex + flags)
    ):
        return None
    trace_id, span_id = int(trace_hex, 16), int(span_hex, 16)
    if not trace_id or not span_id:
        return None
    # An over-long tracestate is dropped, never the trace (W3C: at most 512 characters).
    state = tracestate.strip() if len(tracestate) <= 512 else ""
    return Parent(trace_id, span_id, bool(int(flags, 16) & 1), state)


def header_text(value: Any) -> str | None:
    if isinstance(value, bytes):
        return value.decode("latin-1")
    return value if isinstance(value, str) else None


# -- sampling ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sampler:
    """The standard samplers of `OTEL_TRACES_SAMPLER`: a root decision (always, never,
    or by trace id ratio, with the SDK's bound) and whether a parent's decision wins."""

    NAMES: ClassVar[tuple[str, ...]] = (
        "always_on",
        "always_off",
        "traceidratio",
        "parentbased_always_on",
        "parentbased_always_off",
        "parentbased_traceidratio",
    )

    parent_based: bool
    bound: int  # a root trace is sampled when the low 64 bits of its id are below it

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> "Sampler":
        name = environ.get("OTEL_TRACES_SAMPLER", "").strip().lower() or "parentbased_always_on"
        if name not in cls.NAMES:
            raise ConfigError(f"OTEL_TRACES_SAMPLER={name!r}: use one of {', '.join(cls.NAMES)}")
        rate = 1.0
        if name.endswith("always_off"):
            rate = 0.0
        elif name.endswith("traceidratio"):
            raw = environ.get("OTEL_TRACES_SAMPLER_ARG", "").strip() or "1.0"
            try:
                rate = float(raw)
            except ValueError:
                rate = -1.0
            if not 0.0 <= rate <= 1.0:
                raise ConfigError(
                    f"OTEL_TRACES_SAMPLER_ARG must be a ratio from 0 to 1, not {raw!r}"
                )
        return cls(name.startswith("parentbased_"), TraceIdRatioBased.get_bound_for_rate(rate))

    def sampled(self, parent: Parent | None, trace_id: int) -> bool:
        if parent is not None and self.parent_based:
            return parent.sampled
        return trace_id & TraceIdRatioBased.TRACE_ID_LIMIT < self.bound


# -- OTLP protobuf, field by field (opentelemetry/proto/trace/v1/trace.proto) --------


_ONE_BYTE = tuple(bytes((value,)) for value in range(0x80))


def varint(value: int) -> bytes:
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    if value < 0:
        value += 1 << 64  # int64: two's complement, ten bytes
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def length_delimited(tag: bytes, payload: bytes) -> bytes:
    return tag + varint(len(payload)) + payload


def any_value(value: Any) -> bytes:
    """An AnyValue: string 1, bool 2, int 3, double 4."""
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, int):
        return b"\x18" + varint(value)
    if isinstance(value, float):
        return b"\x21" + struct.pack("<d", value)
    return length_delimited(b"\x0a", str(value).encode())


_KEYS: dict[str, bytes] = {}
# Attributes whose values repeat from span to span (the queue, the kind, the family...):
# each pair is encoded once. The others (ids, sizes, counts) are encoded every time.
_REPEATING = frozenset(
    {
        "messaging.system",
        "messaging.operation.type",
        "messaging.operation.name",
        "messaging.destination.name",
        "messaging.rabbitmq.destination.routing_key",
        "messaging.consumer.group.name",
        "messaging.rabbitmq.message.redelivered",
        "prompt_worker.status",
        "prompt_worker.kind",
        "prompt_worker.family",
        "prompt_worker.template_version",
        "prompt_worker.budget.trimmed",
        "error.type",
    }
)
_PAIRS: dict[tuple[str, type, Any], bytes] = {}
_PAIRS_KEPT = 4096  # a bound, should a repeating attribute's values not repeat after all


def key_value(key: str, value: Any) -> bytes:
    if key in _REPEATING:
        # The type too: True == 1 and "1" != 1, but each encodes differently.
        pair = (key, type(value), value)
        encoded = _PAIRS.get(pair)
        if encoded is None:
            encoded = _encode_key_value(key, value)
            if len(_PAIRS) < _PAIRS_KEPT:
                _PAIRS[pair] = encoded
        return encoded
    return _encode_key_value(key, value)


def _encode_key_value(key: str, value: Any) -> bytes:
    prefix = _KEYS.get(key)
    if prefix is None:
        prefix = _KEYS[key] = length_delimited(b"\x0a", key.encode())
    return length_delimited(b"\x4a", prefix + length_delimited(b"\x12", any_value(value)))


class SpanRecord:
    """One finished span, as plain values until the export thread encodes it."""

    __slots__ = (
        "attributes",
        "end_ns",
        "kind",
        "name",
        "parent_id",
        "span_id",
        "start_ns",
        "status",
        "trace_id",
        "tracestate",
    )

    def __init__(
        self,
        trace_id: int,
        span_id: int,
        parent_id: int,
        name: str,
        kind: int,
        start_ns: int,
        end_ns: int = 0,
        attributes: dict[str, Any] | None = None,
        tracestate: str = "",
    ) -> None:
        self.trace_id = trace_id
        self.span_id = span_id
        self.parent_id = parent_id
        self.name = name
        self.kind = kind
        self.start_ns = start_ns
        self.end_ns = end_ns
        self.attributes = attributes
        self.tracestate = tracestate
        self.status = UNSET

    def encode(self) -> bytes:
        """The span's Span message: trace_id 1, span_id 2, trace_state 3,
        parent_span_id 4, name 5, kind 6, start 7, end 8, attributes 9, status 15."""
        parts = [
            b"\x0a\x10",
            self.trace_id.to_bytes(16, "big"),
            b"\x12\x08",
            self.span_id.to_bytes(8, "big"),
        ]
        if self.tracestate:
            parts.append(length_delimited(b"\x1a", self.tracestate.encode()))
        if self.parent_id:
            parts += (b"\x22\x08", self.parent_id.to_bytes(8, "big"))
        parts += (
            length_delimited(b"\x2a", self.name.encode()),
            b"\x30",
            varint(self.kind),
            b"\x39",
            self.start_ns.to_bytes(8, "little"),
            b"\x41",
            self.end_ns.to_bytes(8, "little"),
        )
        if self.attributes:
            parts += [key_value(key, value) for key, value in self.attributes.items()]
        if self.status:
            parts.append(length_delimited(b"\x7a", b"\x18" + varint(self.status)))
        return b"".join(parts)


def encode_request(resource: bytes, scope: bytes, spans: Sequence[SpanRecord]) -> bytes:
    """An ExportTraceServiceRequest holding `spans` under one resource and scope."""
    scope_spans = scope + b"".join(length_delimited(b"\x12", span.encode()) for span in spans)
    resource_spans = resource + length_delimited(b"\x12", scope_spans)
    return length_delimited(b"\x0a", resource_spans)


def encode_resource(resource: Resource) -> bytes:
    """ResourceSpans' field 1: the Resource with its attributes."""
    attributes = b"".join(
        length_delimited(
            b"\x0a",
            length_delimited(b"\x0a", key.encode()) + length_delimited(b"\x12", any_value(value)),
        )
        for key, value in resource.attributes.items()
    )
    return length_delimited(b"\x0a", attributes)


def encode_scope() -> bytes:
    """ScopeSpans' field 1: the instrumentation scope (the worker, its version)."""
    scope = length_delimited(b"\x0a", b"build-prompt-worker") + length_delimited(
        b"\x12", __version__.encode()
    )
    return length_delimited(b"\x0a", scope)


# -- OTLP over HTTP ----------------------------------------------------------------


class Receiver(Protocol):
    """Where encoded requests go; `send` raises when the receiver does not take one."""

    def send(self, body: bytes) -> None: ...


def otlp_variable(environ: Mapping[str, str], name: str) -> str:
    """`OTEL_EXPORTER_OTLP_TRACES_<name>`, else `OTEL_EXPORTER_OTLP_<name>`."""
    return (
        environ.get(f"OTEL_EXPORTER_OTLP_TRACES_{name}")
        or environ.get(f"OTEL_EXPORTER_OTLP_{name}")
        or ""
    ).strip()


class OtlpHttpReceiver:
    """An OTLP/HTTP receiver (protobuf), configured by the standard variables."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
        if not endpoint:
            base = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
            endpoint = (base or "http://localhost:4318").rstrip("/") + "/v1/traces"
        url = urllib.parse.urlsplit(endpoint)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ConfigError(f"OTLP endpoint {endpoint!r}: an http:// or https:// URL")
        protocol = otlp_variable(environ, "PROTOCOL") or "http/protobuf"
        if protocol != "http/protobuf":
            raise ConfigError(
                f"OTLP protocol {protocol!r}: the worker exports http/protobuf "
                "(set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf)"
            )
        self.url = url
        self.path = url.path or "/v1/traces"
        self.headers = {"Content-Type": "application/x-protobuf"}
        for item in otlp_variable(environ, "HEADERS").split(","):
            key, _, value = item.partition("=")
            if key.strip():
                self.headers[urllib.parse.unquote(key.strip())] = urllib.parse.unquote(
                    value.strip()
                )
        compression = otlp_variable(environ, "COMPRESSION") or "none"
        if compression not in ("gzip", "none"):
            raise ConfigError(f"OTLP compression {compression!r}: gzip or none")
        self.gzip = compression == "gzip"
        if self.gzip:
            self.headers["Content-Encoding"] = "gzip"
        timeout_ms = otlp_variable(environ, "TIMEOUT") or "10000"
        try:
            self.timeout = float(timeout_ms) / 1000
        except ValueError:
            raise ConfigError(f"OTLP timeout {timeout_ms!r}: milliseconds") from None
        certificate = otlp_variable(environ, "CERTIFICATE")
        self.context = (
            ssl.create_default_context(cafile=certificate or None)
            if url.scheme == "https"
            else None
        )
        self.connection: http.client.HTTPConnection | None = None

    def connect(self) -> http.client.HTTPConnection:
        host, port = self.url.hostname or "localhost", self.url.port
        if self.context is not None:
            return http.client.HTTPSConnection(
                host, port, timeout=self.timeout, context=self.context
            )
        return http.client.HTTPConnection(host, port, timeout=self.timeout)

    def send(self, body: bytes) -> None:
        if self.gzip:
            body = gzip.compress(body)
        if self.connection is None:
            self.connection = self.connect()
        try:
            self.connection.request("POST", self.path, body, self.headers)
            response = self.connection.getresponse()
            response.read()
        except (OSError, http.client.HTTPException):
            self.connection.close()
            self.connection = None
            raise
        if not 200 <= response.status < 300:
            raise ConnectionError(f"the OTLP receiver answered {response.status}")


# -- the export queue --------------------------------------------------------------


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


class ExportQueue:
    """Finished spans wait in a bounded queue for one exporting thread; a full queue
    drops spans and says so through `on_dropped(n)`, so that a receiver that is down
    costs the worker nothing but the spans."""

    def __init__(
        self,
        receiver: Receiver,
        resource: bytes,
        settings: QueueSettings,
        on_dropped: Callable[[int], None] | None = None,
    ) -> None:
        self.receiver = receiver
        self.resource = resource
        self.scope = encode_scope()
        self.settings = settings
        self.on_dropped = on_dropped
        self.dropped = 0
        self.spans: collections.deque[SpanRecord] = collections.deque()
        self.wake = threading.Event()
        self.stopping = False
        self.lock = threading.Lock()  # one export at a time: the thread's or a flush
        self.thread = threading.Thread(target=self.export_loop, name="otel-export", daemon=True)
        self.thread.start()

    def add(self, spans: Sequence[SpanRecord]) -> None:
        if len(self.spans) + len(spans) > self.settings.max_queue_size:
            self.drop(len(spans))
            return
        self.spans.extend(spans)
        if len(self.spans) >= self.settings.max_export_batch_size:
            self.wake.set()

    def drop(self, count: int) -> None:
        self.dropped += count
        if self.on_dropped is not None:
            self.on_dropped(count)

    def export_loop(self) -> None:
        while not self.stopping:
            self.wake.wait(self.settings.schedule_delay_s)
            self.wake.clear()
            self.flush()
        self.flush()

    def flush(self) -> None:
        with self.lock:
            while self.spans:
                batch: list[SpanRecord] = []
                while self.spans and len(batch) < self.settings.max_export_batch_size:
                    batch.append(self.spans.popleft())
                try:
                    self.receiver.send(encode_request(self.resource, self.scope, batch))
                except Exception:  # the receiver's trouble must never reach the worker
                    self.drop(len(batch))

    def shutdown(self) -> None:
        self.stopping = True
        self.wake.set()
        self.thread.join(timeout=self.settings.schedule_delay_s + 15)


# -- the spans of a job ------------------------------------------------------------


def make_resource(environ: Mapping[str, str]) -> Resource:
    """The SDK's resource (it reads `OTEL_RESOURCE_ATTRIBUTES` from the process's
    environment), named by `OTEL_SERVICE_NAME`, else by those attributes, else as the
    worker."""
    name = environ.get("OTEL_SERVICE_NAME", "").strip()
    if name:
        return Resource.create({SERVICE_NAME: name})
    named = "service.name=" in environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
    return Resource.create({} if named else {SERVICE_NAME: DEFAULT_SERVICE_NAME})


def wall_clock_offset_ns() -> int:
    """What turns a perf_counter reading (any process: one system-wide clock) into
    nanoseconds since the epoch."""
    return time.time_ns() - time.perf_counter_ns()


class JobTracing:
    """Makes the spans of the jobs one worker process handles."""

    def __init__(
        self,
        sampler: Sampler,
        queue: ExportQueue,
        log_ignored: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.sampler = sampler
        self.queue = queue
        self.log_ignored = log_ignored
        self.random = random.Random()

    @classmethod
    def from_environment(
        cls,
        environ: Mapping[str, str],
        on_dropped: Callable[[int], None] | None = None,
        log_ignored: Callable[[str], None] = lambda _: None,
        receiver: Receiver | None = None,
    ) -> "JobTracing":
        exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() or "otlp"
        if exporter != "otlp":
            raise ConfigError(f"OTEL_TRACES_EXPORTER={exporter!r}: the worker exports otlp")
        queue = ExportQueue(
            receiver if receiver is not None else OtlpHttpReceiver(environ),
            encode_resource(make_resource(environ)),
            QueueSettings.from_environment(environ),
            on_dropped,
        )
        return cls(Sampler.from_environment(environ), queue, log_ignored)

    def shutdown(self) -> None:
        """Export what is queued and stop the export thread."""
        self.queue.shutdown()

    def parent(self, headers: Mapping[str, Any] | None) -> Parent | None:
        """The producer's span in a job's headers; None (a new trace) when there is
        none, or when it is malformed (with one debug line, never an error)."""
        if not headers:
            return None
        traceparent = header_text(headers.get(TRACEPARENT))
        if traceparent is None:
            return None
        parent = parse_traceparent(traceparent, header_text(headers.get(TRACESTATE)) or "")
        if parent is None:
            self.log_ignored(traceparent[:80])
        return parent

    def _start(
        self, headers: Mapping[str, Any] | None, name: str, kind: int
    ) -> tuple[SpanRecord, bool]:
        """A span starting now, the child of the context in `headers` (else a new
        trace's root), and whether the sampler keeps it."""
        parent = self.parent(headers)
        trace_id = parent.trace_id if parent is not None else self.random.getrandbits(128)
        record = SpanRecord(
            trace_id,
            self.random.getrandbits(64) or 1,
            parent.span_id if parent is not None else 0,
            name,
            kind,
            time.time_ns(),
            tracestate=parent.tracestate if parent is not None else "",
        )
        return record, self.sampler.sampled(parent, trace_id)

    def send(self, routing_key: str, headers: Mapping[str, Any] | None = None) -> "SendSpan":
        """A producer's span for publishing a job to `routing_key`: the child of the
        context in `headers` (a dead letter's, say), else a new trace's root."""
        record, sampled = self._start(headers, f"send {routing_key}", PRODUCER)
        if sampled:
            record.attributes = send_attributes(routing_key)
        return SendSpan(record, sampled, record.tracestate, self.queue)

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
        record, sampled = self._start(headers, f"process {queue}", CONSUMER)
        if sampled:
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
            record.attributes = attributes
        return ProcessSpan(self, record, sampled)


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


def send_attributes(routing_key: str) -> dict[str, Any]:
    return {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "send",
        "messaging.operation.name": "publish",
        "messaging.destination.name": "",  # the default exchange
        "messaging.rabbitmq.destination.routing_key": routing_key,
    }


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
    """The process span of one delivery and the children made under it; what is not
    sampled is never recorded, but its context still travels on with the reply."""

    __slots__ = ("children", "record", "sampled", "tracing")

    def __init__(self, tracing: JobTracing, record: SpanRecord, sampled: bool) -> None:
        self.tracing = tracing
        self.record = record
        self.sampled = sampled
        self.children: list[SpanRecord] = []

    @property
    def trace_id(self) -> str | None:
        """The trace id in hex when the span is sampled (a metric's exemplar)."""
        return format(self.record.trace_id, "032x") if self.sampled else None

    def child(self, name: str, kind: int, start_ns: int, end_ns: int = 0) -> SpanRecord:
        record = self.record
        span = SpanRecord(
            record.trace_id,
            self.tracing.random.getrandbits(64) or 1,
            record.span_id,
            name,
            kind,
            start_ns,
            end_ns,
        )
        if self.sampled:
            self.children.append(span)
        return span

    def rendered(self, outcome: "Rendered") -> None:
        """What the render made of the job: its phases (child spans) and outcome."""
        if not self.sampled:
            return
        offset = wall_clock_offset_ns()
        for name, started, ended in outcome.phases:
            self.child(name, INTERNAL, offset + int(started * 1e9), offset + int(ended * 1e9))
        attributes = self.record.attributes
        assert attributes is not None
        attributes.update(
            outcome_attributes(
                status=outcome.status,
                job_id=outcome.job_id,
                kind=outcome.kind,
                family=outcome.family,
                template_version=outcome.template_version,
                error_code=outcome.error_code,
                masked=outcome.masked,
                trimmed=outcome.trimmed,
                tokens_left_out=outcome.tokens_left_out,
            )
        )
        if outcome.status != "ok":
            self.record.status = ERROR

    def send(self, routing_key: str) -> "SendSpan":
        """Start the reply's send span; its context goes into the reply's headers."""
        span = self.child(f"send {routing_key}", PRODUCER, time.time_ns())
        if self.sampled:
            span.attributes = send_attributes(routing_key)
        return SendSpan(span, self.sampled, self.record.tracestate)

    def end(self) -> None:
        if not self.sampled:
            return
        self.record.end_ns = time.time_ns()
        self.tracing.queue.add([self.record, *self.children])


class SendSpan:
    """The span of publishing a message (a reply, or a producer's job), up to the
    broker's confirm. `queue`: where a span of its own (not a process span's child)
    goes when it ends."""

    __slots__ = ("headers", "queue", "record")

    def __init__(
        self,
        record: SpanRecord,
        sampled: bool,
        tracestate: str,
        queue: ExportQueue | None = None,
    ) -> None:
        self.record = record
        self.queue = queue if sampled else None
        # The reply's traceparent: the LLM caller's span becomes this span's child. An
        # unsampled one travels too: its flags tell the caller not to sample either.
        flags = "01" if sampled else "00"
        self.headers = {TRACEPARENT: f"00-{record.trace_id:032x}-{record.span_id:016x}-{flags}"}
        if tracestate:
            self.headers[TRACESTATE] = tracestate

    def end(self, error: BaseException | None = None) -> None:
        self.record.end_ns = time.time_ns()
        if error is not None:
            self.record.status = ERROR
        if self.queue is not None:
            self.queue.add([self.record])
