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
seven spans of one job (bench/bench_side_by_side.py --setting tracing). So a job keeps
only what its spans will say (times, ids, the delivery's facts, the render's outcome)
and, when its process span ends, all its spans are encoded at once as OTLP protobuf
(opentelemetry-proto's schema, written field by field, what repeats encoded once) into
plain bytes, which one export thread posts over OTLP/HTTP. An unsampled job costs a
few random numbers and the reply's `traceparent`. The standard variables mean what they
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
#
# A job's spans are encoded once, when its process span ends, straight from what the
# consumer and the renderer recorded: no span objects, no attribute dictionaries, and
# nothing left for the garbage collector to walk while it waits for export. What repeats
# from job to job (a queue's attributes, a phase's name and kind, a send span's name and
# attributes, the values of repeating attributes) is encoded once and reused.


_ONE_BYTE = tuple(bytes((value,)) for value in range(0x80))


def varint(value: int) -> bytes:
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    if 0 < value < 0x4000:
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    if 0 < value < 0x200000:
        return bytes(((value & 0x7F) | 0x80, ((value >> 7) & 0x7F) | 0x80, value >> 14))
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
# each pair is encoded once, as are small counts of any key. The others (ids, sizes)
# are encoded every time.
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
_SMALL = 0x80  # counts below it are kept encoded, whatever their key
_PAIRS: dict[tuple[str, type, Any], bytes] = {}
_PAIRS_KEPT = 4096  # a bound, should a repeating attribute's values not repeat after all


def key_value(key: str, value: Any) -> bytes:
    """A Span's attribute (field 9): a KeyValue."""
    kind = type(value)
    if key in _REPEATING or (kind is int and 0 <= value < _SMALL):
        # The type too: True == 1 and "1" != 1, but each encodes differently.
        pair = (key, kind, value)
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


def encode_attributes(items: Mapping[str, Any]) -> bytes:
    return b"".join(key_value(key, value) for key, value in items.items())


def key_field(key: str) -> bytes:
    """A KeyValue's key 1, encoded."""
    prefix = _KEYS.get(key)
    if prefix is None:
        prefix = _KEYS[key] = length_delimited(b"\x0a", key.encode())
    return prefix


_SHORT = 256  # string values up to this many bytes long take AttributeKey's fast path


class AttributeKey:
    """An attribute's key, with what comes before each of its values encoded once: by
    the length of a string value (up to _SHORT bytes) or of an int's varint."""

    __slots__ = ("ints", "name", "strings")

    def __init__(self, name: str) -> None:
        self.name = name
        key = key_field(name)
        strings = []
        for size in range(_SHORT):
            value = b"\x0a" + varint(size)  # AnyValue's string 1, without the text
            pair = key + b"\x12" + varint(len(value) + size)
            strings.append(b"\x4a" + varint(len(pair) + len(value) + size) + pair + value)
        self.strings = tuple(strings)
        ints = [b""]
        for size in range(1, 11):  # AnyValue's int 3: a varint of 1 to 10 bytes
            pair = key + b"\x12" + varint(1 + size) + b"\x18"
            ints.append(b"\x4a" + varint(len(pair) + size) + pair)
        self.ints = tuple(ints)

    def string(self, text: str) -> bytes:
        """key_value(name, text)."""
        value = text.encode()
        if len(value) < _SHORT:
            return self.strings[len(value)] + value
        return _encode_key_value(self.name, text)

    def int(self, number: int) -> bytes:
        """key_value(name, number)."""
        value = varint(number)
        return self.ints[len(value)] + value


_DELIVERY_TAG = AttributeKey("messaging.rabbitmq.message.delivery_tag")
_BODY_SIZE = AttributeKey("messaging.message.body.size")
_MESSAGE_ID = AttributeKey("messaging.message.id")
_CONVERSATION_ID = AttributeKey("messaging.message.conversation_id")
_JOB_ID = AttributeKey("prompt_worker.job_id")
_MASKED_TOTAL = AttributeKey("prompt_worker.masked_total")
_TOKENS_LEFT_OUT = AttributeKey("prompt_worker.budget.tokens_left_out")
_REDELIVERED = {
    False: key_value("messaging.rabbitmq.message.redelivered", False),
    True: key_value("messaging.rabbitmq.message.redelivered", True),
}
# A job outcome's attributes that repeat (status, kind, family, template version,
# error code, trimmed), encoded once for each combination (at most _PAIRS_KEPT).
_OUTCOMES: dict[tuple[Any, ...], bytes] = {}
_NOTHING_MASKED = _MASKED_TOTAL.int(0)

# A span's start 7 and end 8: fixed64 nanoseconds since the epoch.
_LOW_64_BITS = (1 << 64) - 1  # the part of a trace id the ratio samplers look at
_TIMES = struct.Struct("<BQBQ")
# A phase span after its name and kind: start 7, end 8, its trace_id 1 and parent 4 and
# the tag of its span_id 2 (30 bytes), and its span_id.
_PHASE = struct.Struct("<BQBQ30sQ")
_ERROR_STATUS = length_delimited(b"\x7a", b"\x18" + varint(ERROR))  # status 15: code 3


def span_head(name: str, kind: int) -> bytes:
    """A Span's name 5 and kind 6."""
    return length_delimited(b"\x2a", name.encode()) + b"\x30" + varint(kind)


def parent_field(span_id: int) -> bytes:
    return b"\x22\x08" + span_id.to_bytes(8, "big") if span_id else b""


def encode_request(resource: bytes, scope: bytes, spans: Sequence[bytes]) -> bytes:
    """An ExportTraceServiceRequest holding `spans` (each one a Span, encoded as
    ScopeSpans' field 2) under one resource and scope."""
    scope_spans = scope + b"".join(spans)
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
    """Finished spans (encoded) wait in a bounded queue for one exporting thread; a full
    queue drops spans and says so through `on_dropped(n)`, so that a receiver that is
    down costs the worker nothing but the spans.

    The thread is woken when a batch is full and then sends full batches only; what is
    left waits for the next full batch or the schedule delay, so that a busy worker
    sends few, large requests."""

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
        self.spans: collections.deque[bytes] = collections.deque()
        self.wake = threading.Event()
        self.stopping = False
        self.lock = threading.Lock()  # one export at a time: the thread's or a flush
        self.thread = threading.Thread(target=self.export_loop, name="otel-export", daemon=True)
        self.thread.start()

    def add(self, spans: Sequence[bytes]) -> None:
        """Queue encoded spans (as encode_request takes them), or drop them all when
        they do not fit."""
        queued = len(self.spans) + len(spans)
        if queued > self.settings.max_queue_size:
            self.drop(len(spans))
            return
        self.spans.extend(spans)
        if queued >= self.settings.max_export_batch_size and not self.wake.is_set():
            self.wake.set()

    def drop(self, count: int) -> None:
        self.dropped += count
        if self.on_dropped is not None:
            self.on_dropped(count)

    def export_loop(self) -> None:
        while not self.stopping:
            woken = self.wake.wait(self.settings.schedule_delay_s)
            self.wake.clear()
            self.flush(full_batches_only=woken and not self.stopping)
        self.flush()

    def flush(self, full_batches_only: bool = False) -> None:
        """Send what is queued (`full_batches_only`: as many full batches as there are)."""
        size = self.settings.max_export_batch_size
        spans = self.spans
        with self.lock:
            while spans and (len(spans) >= size or not full_batches_only):
                batch = [spans.popleft() for _ in range(min(size, len(spans)))]
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
        # What every span of a kind repeats, encoded once: by queue, routing key, phase.
        self._process_heads: dict[str, tuple[bytes, bytes]] = {}
        self._send_heads: dict[str, tuple[bytes, bytes, bytes]] = {}
        self._phase_heads: dict[str, bytes] = {}

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

    def _context(self, headers: Mapping[str, Any] | None) -> tuple[int, int, str, bool]:
        """The trace a span joins: the context in `headers` (else a new trace): its trace
        id, the parent span id (0: none), its tracestate, and whether it is sampled."""
        parent = self.parent(headers) if headers else None
        if parent is None:
            trace_id = self.random.getrandbits(128)
            return trace_id, 0, "", self.sampler.sampled(None, trace_id)
        sampled = self.sampler.sampled(parent, parent.trace_id)
        return parent.trace_id, parent.span_id, parent.tracestate, sampled

    def span_id(self) -> int:
        return self.random.getrandbits(64) or 1

    def send(self, routing_key: str, headers: Mapping[str, Any] | None = None) -> "SendSpan":
        """A producer's span for publishing a job to `routing_key`: the child of the
        context in `headers` (a dead letter's, say), else a new trace's root."""
        trace_id, parent_id, tracestate, sampled = self._context(headers)
        span = SendSpan(self, trace_id, self.span_id(), routing_key, sampled, tracestate)
        if sampled:
            span.parent_id = parent_id
            span.queued = True
        return span

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
        if headers:
            trace, parent_id, tracestate, sampled = self._context(headers)
        else:  # a new trace: the root sampler decides
            trace, parent_id, tracestate = self.random.getrandbits(128), 0, ""
            sampled = trace & _LOW_64_BITS < self.sampler.bound
        span = ProcessSpan(self, trace, tracestate, sampled)
        if sampled:
            span.start_ns = time.time_ns()
            span.span_id = self.span_id()
            span.parent_id = parent_id
            span.delivery = (
                queue,
                message_id,
                correlation_id,
                delivery_tag,
                redelivered,
                body_size,
            )
            span.outcome = span.sends = span.trace_hex = None
        return span

    # -- encoding, once a span has ended --------------------------------------------

    def process_head(self, queue: str) -> tuple[bytes, bytes]:
        """A process span's name and kind, and the attributes of its queue."""
        head = self._process_heads.get(queue)
        if head is None:
            head = self._process_heads[queue] = (
                span_head(f"process {queue}", CONSUMER),
                encode_attributes(
                    {
                        "messaging.system": SYSTEM,
                        "messaging.operation.type": "process",
                        "messaging.operation.name": "process",
                        "messaging.destination.name": "",  # the default exchange
                        "messaging.rabbitmq.destination.routing_key": queue,
                        "messaging.consumer.group.name": queue,
                    }
                ),
            )
        return head

    def send_head(self, routing_key: str) -> tuple[bytes, bytes, bytes]:
        """A send span's name and kind, its attributes (all of them), and what it
        begins with as a process span's child that went well: its length too."""
        head = self._send_heads.get(routing_key)
        if head is None:
            named = span_head(f"send {routing_key}", PRODUCER)
            attributes = encode_attributes(
                {
                    "messaging.system": SYSTEM,
                    "messaging.operation.type": "send",
                    "messaging.operation.name": "publish",
                    "messaging.destination.name": "",  # the default exchange
                    "messaging.rabbitmq.destination.routing_key": routing_key,
                }
            )
            # As a process span's child that went well, its length is known too: the
            # name and kind, start and end, attributes, the 30 bytes of where it
            # belongs (_PHASE's) and its span id.
            size = len(named) + _TIMES.size + len(attributes) + 30 + 8
            head = self._send_heads[routing_key] = (
                named,
                attributes,
                b"\x12" + varint(size) + named,
            )
        return head

    def phase_head(self, name: str) -> bytes:
        """What a phase span of that name begins with: its length (as ScopeSpans' field
        2) and its name and kind, which come first (protobuf takes fields in any order)."""
        head = self._phase_heads.get(name)
        if head is None:
            named = span_head(name, INTERNAL)
            head = self._phase_heads[name] = b"\x12" + varint(len(named) + _PHASE.size) + named
        return head

    def encode_process(self, span: "ProcessSpan", end_ns: int) -> list[bytes]:
        """A job's spans: its process span, its render phases and its sends. Written
        for the interpreter's sake: a job's spans cost some hundred bytecodes."""
        queue, message_id, correlation_id, delivery_tag, redelivered, body_size = span.delivery
        try:
            head, queue_attributes = self._process_heads[queue]
        except KeyError:
            head, queue_attributes = self.process_head(queue)
        own = span.span_id.to_bytes(8, "big")
        trace = b"\x0a\x10" + span.trace.to_bytes(16, "big")
        # What every child span says of where it belongs: the trace, its parent, and
        # the tag of its own span id, which follows (_PHASE's 30 bytes).
        family = trace + b"\x22\x08" + own + b"\x12\x08"
        parts = [trace, b"\x12\x08", own]
        if span.tracestate:
            parts.append(length_delimited(b"\x1a", span.tracestate.encode()))
        if span.parent_id:
            parts += (b"\x22\x08", span.parent_id.to_bytes(8, "big"))
        parts += (
            head,
            _TIMES.pack(0x39, span.start_ns, 0x41, end_ns),
            queue_attributes,
            _DELIVERY_TAG.int(delivery_tag),
            _BODY_SIZE.int(body_size),
            _REDELIVERED[redelivered],
        )
        if message_id:
            parts.append(_MESSAGE_ID.string(message_id))
        if correlation_id:
            parts.append(_CONVERSATION_ID.string(correlation_id))
        spans = [b""]  # the process span goes first, once its attributes are all known
        outcome = span.outcome
        if outcome is not None:
            parts.append(outcome_attributes(outcome))
            if outcome.status != "ok":
                parts.append(_ERROR_STATUS)
            phases = outcome.phases
            if phases:
                offset = time.time_ns() - time.perf_counter_ns()
                heads, pack, bits = self._phase_heads, _PHASE.pack, self.random.getrandbits
                for name, started, ended in phases:
                    try:
                        phase = heads[name]
                    except KeyError:
                        phase = self.phase_head(name)
                    # Random span ids need no byte order: any eight random bytes are one.
                    spans.append(
                        phase
                        + pack(
                            0x39,
                            offset + int(started * 1e9),
                            0x41,
                            offset + int(ended * 1e9),
                            family,
                            bits(64) or 1,
                        )
                    )
        if span.sends:
            for send in span.sends:
                spans.append(send.encode(family))
        body = b"".join(parts)
        spans[0] = b"\x12" + varint(len(body)) + body
        return spans


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


def outcome_attributes(outcome: Rendered) -> bytes:
    """What a process span says of a job's outcome (encoded attributes): never payload
    text. What repeats from job to job (its status, kind, family, template version,
    error code and whether it was trimmed) is encoded once."""
    common = (
        outcome.status,
        outcome.kind,
        outcome.family,
        outcome.template_version,
        outcome.error_code,
        outcome.trimmed,
    )
    encoded = _OUTCOMES.get(common)
    if encoded is None:
        status, kind, family, template_version, error_code, trimmed = common
        encoded = key_value("prompt_worker.status", status)
        for key, value in (
            ("prompt_worker.kind", kind),
            ("prompt_worker.family", family),
            ("prompt_worker.template_version", template_version),
            ("error.type", error_code),
        ):
            if value:
                encoded += key_value(key, value)
        encoded += key_value("prompt_worker.budget.trimmed", trimmed)
        if len(_OUTCOMES) < _PAIRS_KEPT:
            _OUTCOMES[common] = encoded
    job_id, masked = outcome.job_id, outcome.masked
    if masked:
        parts = [encoded, _JOB_ID.string(job_id) if job_id else b""]
        for detector, count in masked.items():
            parts.append(key_value(f"prompt_worker.masked.{detector}", count))
        parts += (
            _MASKED_TOTAL.int(sum(masked.values())),
            _TOKENS_LEFT_OUT.int(outcome.tokens_left_out),
        )
        return b"".join(parts)
    return b"".join(
        (
            encoded,
            _JOB_ID.string(job_id) if job_id else b"",
            _NOTHING_MASKED,
            _TOKENS_LEFT_OUT.int(outcome.tokens_left_out),
        )
    )


class ProcessSpan:
    """The process span of one delivery and what is made under it. Its spans are
    encoded when it ends; what is not sampled is never recorded, but its context still
    travels on with the reply."""

    __slots__ = (
        "delivery",
        "outcome",
        "parent_id",
        "sampled",
        "sends",
        "span_id",
        "start_ns",
        "trace",
        "trace_hex",
        "tracestate",
        "tracing",
    )
    # Set only when sampled (JobTracing.process): the process span's own id, its
    # parent's, its start, the delivery's facts (queue, message id, correlation id, tag,
    # redelivered, body size), the render's outcome and the reply's send spans.
    span_id: int
    parent_id: int
    start_ns: int
    delivery: tuple[str, str | None, str | None, int, bool, int]
    outcome: "Rendered | None"
    sends: "list[SendSpan] | None"

    def __init__(self, tracing: JobTracing, trace: int, tracestate: str, sampled: bool) -> None:
        self.tracing = tracing
        self.trace = trace
        self.tracestate = tracestate
        self.sampled = sampled
        self.trace_hex: str | None = None

    @property
    def trace_id(self) -> str | None:
        """The trace id in hex when the span is sampled (a metric's exemplar)."""
        if not self.sampled:
            return None
        if self.trace_hex is None:
            self.trace_hex = format(self.trace, "032x")
        return self.trace_hex

    def rendered(self, outcome: Rendered) -> None:
        """What the render made of the job: its phases (child spans) and outcome."""
        if self.sampled:
            self.outcome = outcome

    def send(self, routing_key: str) -> "SendSpan":
        """Start the reply's send span; its context goes into the reply's headers."""
        tracing = self.tracing
        span = SendSpan(
            tracing, self.trace, tracing.span_id(), routing_key, self.sampled, self.tracestate
        )
        if self.sampled:
            if self.sends is None:
                self.sends = [span]
            else:
                self.sends.append(span)
        return span

    def end(self) -> None:
        if self.sampled:
            tracing = self.tracing
            tracing.queue.add(tracing.encode_process(self, time.time_ns()))


class SendSpan:
    """The span of publishing a message (a reply, or a producer's job), up to the
    broker's confirm. One of its own (`queued`: not a process span's child) is queued
    for export when it ends."""

    __slots__ = (
        "end_ns",
        "error",
        "headers",
        "parent_id",
        "queued",
        "routing_key",
        "sampled",
        "span_id",
        "start_ns",
        "trace",
        "tracestate",
        "tracing",
    )
    # Set only when sampled.
    tracing: JobTracing
    trace: int
    span_id: int
    routing_key: str
    tracestate: str
    parent_id: int
    start_ns: int
    end_ns: int
    error: bool
    queued: bool

    def __init__(
        self,
        tracing: JobTracing,
        trace: int,
        span_id: int,
        routing_key: str,
        sampled: bool,
        tracestate: str,
    ) -> None:
        self.sampled = sampled
        # The reply's traceparent: the LLM caller's span becomes this span's child. An
        # unsampled one travels too: its flags tell the caller not to sample either.
        ids = ((trace << 64) | span_id).to_bytes(24, "big").hex()
        self.headers = {TRACEPARENT: f"00-{ids[:32]}-{ids[32:]}-{'01' if sampled else '00'}"}
        if tracestate:
            self.headers[TRACESTATE] = tracestate
        if sampled:
            self.start_ns = time.time_ns()
            self.tracing = tracing
            self.trace = trace
            self.span_id = span_id
            self.routing_key = routing_key
            self.tracestate = tracestate
            self.parent_id = self.end_ns = 0
            self.error = self.queued = False

    def end(self, error: BaseException | None = None) -> None:
        if not self.sampled:
            return
        self.end_ns = time.time_ns()
        if error is not None:
            self.error = True
        if self.queued:
            trace = b"\x0a\x10" + self.trace.to_bytes(16, "big")
            self.tracing.queue.add(
                [self.encode(trace + parent_field(self.parent_id) + b"\x12\x08")]
            )

    def encode(self, family: bytes) -> bytes:
        """The span, `family` saying where it belongs (JobTracing.encode_process)."""
        tracing = self.tracing
        head, attributes, as_child = tracing.send_head(self.routing_key)
        times = _TIMES.pack(0x39, self.start_ns, 0x41, self.end_ns)
        span_id = self.span_id.to_bytes(8, "big")
        if not self.error and not self.queued and len(family) == 30:
            return b"".join((as_child, times, attributes, family, span_id))
        body = b"".join(
            (
                head,
                times,
                attributes,
                _ERROR_STATUS if self.error else b"",
                length_delimited(b"\x1a", self.tracestate.encode())
                if self.queued and self.tracestate
                else b"",
                family,
                span_id,
            )
        )
        return b"\x12" + varint(len(body)) + body
