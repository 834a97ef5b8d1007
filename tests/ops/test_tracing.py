"""Tracing on the OpenTelemetry SDK: when the `OTEL_*` variables turn it on, how the
SDK is configured from them, the spans of one job, and the spans the SDK loses.

Spans are read back from the SDK's in-memory exporter, or from what its OTLP/HTTP
exporter posts to a receiver in this process (decoded with OpenTelemetry's own protobuf
classes)."""

import gzip
import json
import os
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpSpanExporter,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from tests.tls_certs import make_authority
from worker.errors import ConfigError
from worker.ops.otel import JobTracing, LostSpans, exporter_names, make_exporter
from worker.ops.tracing import start_tracing, tracing_requested
from worker.render.renderer import Renderer

REPO = Path(__file__).resolve().parents[2]
JOB = REPO / "tests" / "bench_jobs" / "typical_react_job.json"
PRODUCER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PRODUCER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{PRODUCER_TRACE}-{PRODUCER_SPAN}-01"
PHASES = ["decode", "mask", "validate", "build"]


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK reads the process's environment: each test starts from none of OTEL_*."""
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)
    # Switched on by the worker for its dropped-span count; restored after each test.
    monkeypatch.setenv("OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED", "true")


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "x", "OTEL_TRACES_SAMPLER": "always_on"}, False),
        ({"OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "console,otlp"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://h"}, False),
    ],
)
def test_only_the_standard_variables_turn_tracing_on(environ: dict[str, str], on: bool) -> None:
    assert tracing_requested(environ) is on
    if not on:
        assert start_tracing(environ) is None


def test_with_tracing_off_nothing_of_opentelemetry_is_imported() -> None:
    code = (
        "import sys, json\n"
        "import worker.commands.serve_cmd, worker.transport.consumer.worker, worker.transport.producers.client\n"
        "from worker.ops.tracing import start_tracing\n"
        "from worker.render.renderer import Renderer\n"
        "assert start_tracing({}) is None\n"
        "Renderer().render(open('tests/bench_jobs/typical_react_job.json', 'rb').read())\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('opentelemetry'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout) == []


# -- configuration: the SDK's own, from the environment ---------------------------


@pytest.mark.parametrize(
    ("environ", "names"),
    [
        ({}, ["otlp_proto_http"]),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, ["otlp_proto_http"]),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, ["otlp_proto_grpc"]),
        (
            {
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            },
            ["otlp_proto_http"],
        ),
        ({"OTEL_TRACES_EXPORTER": "console, otlp"}, ["console", "otlp_proto_http"]),
        ({"OTEL_TRACES_EXPORTER": "otlp_proto_grpc"}, ["otlp_proto_grpc"]),
    ],
)
def test_the_exporters_are_those_the_variables_name(
    environ: dict[str, str], names: list[str]
) -> None:
    assert exporter_names(environ) == names


@pytest.mark.parametrize(
    ("name", "exporter_class"),
    [
        ("otlp_proto_http", HttpSpanExporter),
        ("otlp_proto_grpc", GrpcSpanExporter),
        ("console", ConsoleSpanExporter),
    ],
)
def test_each_exporter_is_the_installed_packages_own(
    name: str, exporter_class: type[SpanExporter]
) -> None:
    exporter = make_exporter(name, LostSpans(None))
    try:
        assert type(exporter) is exporter_class
    finally:
        exporter.shutdown()


@pytest.mark.parametrize(
    ("environ", "match"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "no trace exporter 'zipkin' is installed"),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "OTLP protocol 'http/json'"),
        ({"OTEL_TRACES_SAMPLER": "sometimes"}, "OTEL_TRACES_SAMPLER='sometimes'"),
        (
            {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"},
            "OTEL_TRACES_SAMPLER_ARG",
        ),
        (
            {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "x"},
            "OTEL_TRACES_SAMPLER_ARG",
        ),
        (
            {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_COMPRESSION": "zstd"},
            "the otlp_proto_grpc trace exporter: .*zstd",
        ),
        ({"OTEL_BSP_MAX_QUEUE_SIZE": "0"}, "OTEL_BSP_"),
        ({"OTEL_BSP_MAX_QUEUE_SIZE": "8", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "16"}, "OTEL_BSP_"),
    ],
)
def test_settings_tracing_cannot_follow_are_configuration_errors(
    monkeypatch: pytest.MonkeyPatch, environ: dict[str, str], match: str
) -> None:
    for name, value in {"OTEL_TRACES_EXPORTER": "otlp", **environ}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=match):
        start_tracing(os.environ)


def test_a_propagator_that_is_not_installed_is_a_configuration_error() -> None:
    # opentelemetry.propagate reads OTEL_PROPAGATORS once, when first imported.
    code = (
        "import os\n"
        "from worker.errors import ConfigError\n"
        "from worker.ops.tracing import start_tracing\n"
        "try:\n"
        "    start_tracing(os.environ)\n"
        "except ConfigError as exc:\n"
        "    print(exc)\n"
    )
    env = {
        **os.environ,
        "OTEL_TRACES_EXPORTER": "console",
        "OTEL_PROPAGATORS": "tracecontext,xray9",
    }
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.startswith("OTEL_PROPAGATORS: Propagator xray9 not found")


def test_an_exporter_whose_package_does_not_import_is_a_configuration_error(
    tmp_path: Path,
) -> None:
    # An installed distribution whose entry point names a module that is not there.
    info = tmp_path / "broken_exporter-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-exporter\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[opentelemetry_traces_exporter]\nbroken = no_such_module_here:Exporter\n"
    )
    code = (
        "import os\n"
        "from worker.errors import ConfigError\n"
        "from worker.ops.tracing import start_tracing\n"
        "try:\n"
        "    start_tracing(os.environ)\n"
        "except ConfigError as exc:\n"
        "    print(exc)\n"
    )
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "broken", "PYTHONPATH": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.startswith("opentelemetry_traces_exporter 'broken' cannot be loaded")
    assert "no_such_module_here" in out.stdout


# -- the spans of a job ------------------------------------------------------------


def tracing(
    monkeypatch: pytest.MonkeyPatch, **environ: str
) -> tuple[JobTracing, InMemorySpanExporter, list[str]]:
    """Tracing configured from `environ`, its spans kept in memory."""
    for name, value in {"OTEL_SERVICE_NAME": "w", **environ}.items():
        monkeypatch.setenv(name, value)
    memory = InMemorySpanExporter()
    ignored: list[str] = []
    traced = JobTracing.from_environment(os.environ, log_ignored=ignored.append, exporters=[memory])
    return traced, memory, ignored


def finished(traced: JobTracing, memory: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    """By name: the last span of each name, once the provider has shut down."""
    traced.shutdown()
    return {span.name: span for span in memory.get_finished_spans()}


def render_one(
    traced: JobTracing, headers: dict[str, object] | None, body: bytes | None = None
) -> dict[str, str]:
    """What the consumer does with one delivery; the reply's headers."""
    body = JOB.read_bytes() if body is None else body
    span = traced.process(
        headers,
        queue="build-prompt",
        message_id="m-1",
        correlation_id="c-1",
        delivery_tag=7,
        redelivered=False,
        body_size=len(body),
    )
    span.rendered(Renderer().render(body))
    send = span.send("build-prompt.replies")
    send.end()
    span.end()
    return send.headers


def hex_span(span: ReadableSpan) -> str:
    assert span.context is not None
    return format(span.context.span_id, "016x")


def hex_trace(span: ReadableSpan) -> str:
    assert span.context is not None
    return format(span.context.trace_id, "032x")


def read(traceparent: str) -> tuple[str, str, str, bool]:
    """A traceparent's version, trace id, span id and sampled flag (of its flags only
    that: SDK releases differ in the others, such as the random trace id flag)."""
    version, trace_id, span_id, flags = traceparent.split("-")
    return version, trace_id, span_id, bool(int(flags, 16) & 1)


def sampled_flag(traceparent: str) -> bool:
    return read(traceparent)[3]


def parent_of(span: ReadableSpan) -> str:
    return "" if span.parent is None else format(span.parent.span_id, "016x")


def test_a_jobs_spans_continue_the_producers_trace_and_hand_it_to_the_reply(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    traced, memory, ignored = tracing(monkeypatch)
    reply_headers = render_one(
        traced, {"traceparent": TRACEPARENT.encode(), "tracestate": "vendor=1", "x-other": 1}
    )
    spans = finished(traced, memory)

    assert ignored == []
    assert set(spans) == {"process build-prompt", "send build-prompt.replies"}
    process, send = spans["process build-prompt"], spans["send build-prompt.replies"]
    assert process.kind is SpanKind.CONSUMER
    assert parent_of(process) == PRODUCER_SPAN
    assert process.parent is not None and process.parent.is_remote
    assert process.context is not None
    assert process.context.trace_state.to_header() == "vendor=1"
    assert {hex_trace(span) for span in spans.values()} == {PRODUCER_TRACE}
    assert parent_of(send) == hex_span(process)
    assert send.kind is SpanKind.PRODUCER
    assert set(reply_headers) == {"traceparent", "tracestate"}
    assert read(reply_headers["traceparent"]) == ("00", PRODUCER_TRACE, hex_span(send), True)
    assert reply_headers["tracestate"] == "vendor=1"
    found = dict(process.attributes or {})
    assert found["messaging.system"] == "rabbitmq"
    assert found["messaging.operation.type"] == "process"
    assert found["messaging.rabbitmq.destination.routing_key"] == "build-prompt"
    assert found["messaging.rabbitmq.message.delivery_tag"] == 7
    assert found["messaging.rabbitmq.message.redelivered"] is False
    assert found["messaging.message.id"] == "m-1"
    assert found["messaging.message.conversation_id"] == "c-1"
    assert found["prompt_worker.kind"] == "react"
    assert found["prompt_worker.family"] == "tarsy"
    assert str(found["prompt_worker.template_version"]).startswith("tarsy-")
    assert found["prompt_worker.status"] == "ok"
    assert dict(send.attributes or {})["messaging.operation.type"] == "send"
    assert process.resource.attributes["service.name"] == "w"


def test_the_render_phases_are_events_of_the_process_span_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    traced, memory, _ = tracing(monkeypatch)
    render_one(traced, None)
    spans = finished(traced, memory)
    process, send = spans["process build-prompt"], spans["send build-prompt.replies"]
    events = process.events
    assert [event.name for event in events] == PHASES
    assert process.start_time is not None and send.start_time is not None
    assert process.end_time is not None and send.end_time is not None
    times = [event.timestamp for event in events]
    assert process.start_time <= times[0] and times == sorted(times)
    for event, later in zip(events, [*times[1:], send.start_time], strict=True):
        duration = dict(event.attributes or {})["prompt_worker.phase.duration_s"]
        assert isinstance(duration, float)
        assert duration >= 0 and event.timestamp + duration * 1e9 <= later + 1_000
    assert send.end_time <= process.end_time


def test_an_error_reply_marks_the_process_span_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    traced, memory, _ = tracing(monkeypatch)
    render_one(traced, None, b"not json")
    process = finished(traced, memory)["process build-prompt"]
    assert process.status.status_code is StatusCode.ERROR
    assert dict(process.attributes or {})["error.type"] == "invalid_json"


@dataclass
class Outcome:
    """What a render tells the trace (worker.ops.otel.Rendered), made up."""

    status: str = "ok"
    job_id: str | None = "job-1"
    kind: str | None = "react"
    family: str | None = "tarsy"
    template_version: str | None = "tarsy-7"
    error_code: str | None = None
    masked: dict[str, int] = field(default_factory=dict)
    trimmed: bool = False
    tokens_left_out: int = 0
    phases: list[tuple[str, float, float]] = field(default_factory=list)
    exception: BaseException | None = None


def process_one(traced: JobTracing, tag: int = 1, headers: dict[str, Any] | None = None) -> Any:
    return traced.process(
        headers,
        queue="build-prompt",
        message_id=None,
        correlation_id=f"c-{tag}",
        delivery_tag=tag,
        redelivered=tag == 3,
        body_size=1000 * tag,
    )


def test_an_internal_error_and_a_failed_delivery_put_their_exception_on_the_span(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    traced, memory, _ = tracing(monkeypatch)
    internal = process_one(traced, 1)
    internal.rendered(Outcome(status="error", error_code="internal", exception=KeyError("builder")))
    internal.end()
    broken = process_one(traced, 2)
    broken.failed(RuntimeError("handler bug"))
    broken.end()
    traced.shutdown()
    first, second = memory.get_finished_spans()
    for span, kind in ((first, "KeyError"), (second, "RuntimeError")):
        assert span.status.status_code is StatusCode.ERROR
        [event] = span.events
        assert event.name == "exception"
        assert dict(event.attributes or {})["exception.type"] == kind


def test_no_span_carries_payload_text(monkeypatch: pytest.MonkeyPatch) -> None:
    traced, memory, _ = tracing(monkeypatch)
    job = json.loads(JOB.read_text())
    marker = "payload-text-that-must-stay-out-of-traces"
    job["session"]["alert_data"] = json.dumps({"note": marker})
    render_one(traced, None, json.dumps(job).encode())
    traced.shutdown()
    spans = memory.get_finished_spans()
    assert len(spans) == 2
    for span in spans:
        assert marker not in span.to_json()


@pytest.mark.parametrize(
    "traceparent",
    [
        b"garbage",
        b"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        b"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        b"00-xyz",
    ],
)
def test_a_malformed_traceparent_starts_a_new_trace_with_one_debug_line(
    monkeypatch: pytest.MonkeyPatch, traceparent: bytes
) -> None:
    traced, memory, ignored = tracing(monkeypatch)
    render_one(traced, {"traceparent": traceparent})
    process = finished(traced, memory)["process build-prompt"]
    assert process.parent is None
    assert hex_trace(process) != PRODUCER_TRACE
    assert ignored == [traceparent.decode()]


def test_a_later_version_with_more_fields_is_read_as_the_spec_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    traced, memory, ignored = tracing(monkeypatch)
    render_one(traced, {"traceparent": f"01-{PRODUCER_TRACE}-{PRODUCER_SPAN}-01-more"})
    process = finished(traced, memory)["process build-prompt"]
    assert (hex_trace(process), parent_of(process)) == (PRODUCER_TRACE, PRODUCER_SPAN)
    assert ignored == []


def test_a_job_without_headers_starts_a_new_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    traced, memory, ignored = tracing(monkeypatch)
    reply_headers = render_one(traced, None)
    spans = finished(traced, memory)
    process = spans["process build-prompt"]
    assert process.parent is None
    assert reply_headers["traceparent"].split("-")[1] == hex_trace(process)
    assert ignored == []


def test_an_unsampled_job_records_nothing_but_hands_its_context_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    traced, memory, _ = tracing(monkeypatch)
    unsampled = f"00-{PRODUCER_TRACE}-{PRODUCER_SPAN}-00"
    span = process_one(traced, headers={"traceparent": unsampled, "tracestate": "v=2"})
    assert span.trace_id is None
    span.rendered(Outcome())
    send = span.send("build-prompt.replies")
    send.end()
    span.end()
    assert finished(traced, memory) == {}
    version, trace_id, span_id, sampled = read(send.headers["traceparent"])
    assert (version, trace_id, sampled) == ("00", PRODUCER_TRACE, False)
    assert span_id != PRODUCER_SPAN
    assert send.headers["tracestate"] == "v=2"


@pytest.mark.parametrize(
    ("sampler", "ratio", "parent_flags", "sampled"),
    [
        ("parentbased_always_on", "", None, True),
        ("parentbased_always_on", "", "00", False),
        ("parentbased_always_off", "", "01", True),
        ("parentbased_always_off", "", None, False),
        ("parentbased_traceidratio", "0", "01", True),
        ("parentbased_traceidratio", "0", None, False),
        ("parentbased_traceidratio", "1", None, True),
        ("traceidratio", "0", "01", False),
        ("always_on", "", "00", True),
        ("always_off", "", "01", False),
    ],
)
def test_the_sampler_is_the_one_the_variables_name(
    monkeypatch: pytest.MonkeyPatch,
    sampler: str,
    ratio: str,
    parent_flags: str | None,
    sampled: bool,
) -> None:
    traced, memory, _ = tracing(
        monkeypatch, OTEL_TRACES_SAMPLER=sampler, OTEL_TRACES_SAMPLER_ARG=ratio
    )
    headers: dict[str, object] | None = None
    if parent_flags is not None:
        headers = {"traceparent": f"00-{PRODUCER_TRACE}-{PRODUCER_SPAN}-{parent_flags}"}
    reply_headers = render_one(traced, headers)
    spans = finished(traced, memory)
    assert bool(spans) is sampled
    assert sampled_flag(reply_headers["traceparent"]) is sampled


def test_the_resource_is_the_sdks_named_as_the_worker_unless_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=prod,team=sre")
    traced = JobTracing.from_environment(os.environ, exporters=[InMemorySpanExporter()])
    resource = traced.provider.resource.attributes
    traced.shutdown()
    assert resource["service.name"] == "build-prompt-worker"
    assert resource["deployment.environment"] == "prod"
    assert resource["telemetry.sdk.name"] == "opentelemetry"
    assert str(resource["service.version"])
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=from-attributes")
    named = JobTracing.from_environment(os.environ, exporters=[InMemorySpanExporter()])
    assert named.provider.resource.attributes["service.name"] == "from-attributes"
    named.shutdown()
    monkeypatch.setenv("OTEL_SERVICE_NAME", "prompts-eu")
    renamed = JobTracing.from_environment(os.environ, exporters=[InMemorySpanExporter()])
    assert renamed.provider.resource.attributes["service.name"] == "prompts-eu"
    renamed.shutdown()


def test_span_limits_are_the_sdks_from_the_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    traced, memory, _ = tracing(monkeypatch, OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT="5")
    render_one(traced, None)
    process = finished(traced, memory)["process build-prompt"]
    assert process.attributes is not None and len(process.attributes) == 5
    assert process.dropped_attributes > 0


def test_baggage_on_a_job_travels_on_with_its_reply(monkeypatch: pytest.MonkeyPatch) -> None:
    traced, _, _ = tracing(monkeypatch)
    reply_headers = render_one(
        traced, {"traceparent": TRACEPARENT, "baggage": "tenant=acme,incident=INC-7"}
    )
    traced.shutdown()
    assert reply_headers["baggage"] == "tenant=acme,incident=INC-7"
    assert reply_headers["traceparent"].split("-")[1] == PRODUCER_TRACE


def test_b3_headers_are_read_and_written_when_otel_propagators_says_b3() -> None:
    # opentelemetry.propagate reads OTEL_PROPAGATORS once, when first imported.
    code = f"""
import json, os
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from worker.ops.otel import JobTracing
memory = InMemorySpanExporter()
traced = JobTracing.from_environment(os.environ, exporters=[memory])
span = traced.process(
    {{"x-b3-traceid": "{PRODUCER_TRACE}", "x-b3-spanid": "{PRODUCER_SPAN}", "x-b3-sampled": "1"}},
    queue="q", message_id=None, correlation_id=None, delivery_tag=1, redelivered=False,
    body_size=1,
)
send = span.send("r")
send.end()
span.end()
traced.shutdown()
[process] = [s for s in memory.get_finished_spans() if s.name == "process q"]
print(json.dumps({{"parent": format(process.parent.span_id, "016x"), "reply": send.headers}}))
"""
    env = {**os.environ, "OTEL_PROPAGATORS": "b3multi"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True
    )
    result = json.loads(out.stdout)
    assert result["parent"] == PRODUCER_SPAN
    assert result["reply"]["x-b3-traceid"] == PRODUCER_TRACE
    assert result["reply"]["x-b3-sampled"] == "1"
    assert "traceparent" not in result["reply"]


def test_a_producers_send_span_continues_the_context_it_is_given_or_starts_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    traced, memory, _ = tracing(monkeypatch)
    rooted = traced.send("build-prompt")
    rooted.end()
    child = traced.send("build-prompt", {"traceparent": TRACEPARENT, "tracestate": "v=1"})
    child.end()
    traced.shutdown()
    by_parent = {parent_of(span): span for span in memory.get_finished_spans()}
    assert set(by_parent) == {"", PRODUCER_SPAN}
    assert by_parent[""].kind is SpanKind.PRODUCER
    assert by_parent[""].name == "send build-prompt"
    assert hex_trace(by_parent[PRODUCER_SPAN]) == PRODUCER_TRACE
    assert set(child.headers) == {"traceparent", "tracestate"}
    assert read(child.headers["traceparent"]) == (
        "00",
        PRODUCER_TRACE,
        hex_span(by_parent[PRODUCER_SPAN]),
        True,
    )
    assert child.headers["tracestate"] == "v=1"
    assert rooted.headers["traceparent"].split("-")[1] == hex_trace(by_parent[""])


def test_a_process_span_says_what_was_masked_and_trimmed_job_by_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    traced, memory, _ = tracing(monkeypatch)
    now = time.perf_counter()
    outcomes = [
        Outcome(
            job_id="job-1",
            masked={"private_key": 2, "github_token": 300},
            trimmed=True,
            tokens_left_out=12_345,
            phases=[("decode", now, now + 0.001), ("budget", now + 0.001, now + 0.002)],
        ),
        Outcome(job_id="job-2"),
        Outcome(status="error", job_id=None, kind=None, error_code="invalid_job"),
    ]
    for tag, outcome in enumerate(outcomes, start=1):
        span = process_one(traced, tag, {"traceparent": TRACEPARENT})
        span.rendered(outcome)
        span.end()
    traced.shutdown()
    processes = [
        span for span in memory.get_finished_spans() if span.name == "process build-prompt"
    ]
    found = [dict(span.attributes or {}) for span in processes]
    assert [a["messaging.rabbitmq.message.delivery_tag"] for a in found] == [1, 2, 3]
    assert [a["messaging.message.body.size"] for a in found] == [1000, 2000, 3000]
    assert [a["messaging.rabbitmq.message.redelivered"] for a in found] == [False, False, True]
    assert [a["messaging.message.conversation_id"] for a in found] == ["c-1", "c-2", "c-3"]
    assert all("messaging.message.id" not in a for a in found)
    first, second, third = found
    assert first["prompt_worker.job_id"] == "job-1"
    assert first["prompt_worker.masked.private_key"] == 2
    assert first["prompt_worker.masked.github_token"] == 300
    assert first["prompt_worker.masked_total"] == 302
    assert first["prompt_worker.budget.trimmed"] is True
    assert first["prompt_worker.budget.tokens_left_out"] == 12_345
    assert first["prompt_worker.template_version"] == "tarsy-7"
    assert second["prompt_worker.job_id"] == "job-2"
    assert second["prompt_worker.masked_total"] == 0
    assert second["prompt_worker.budget.trimmed"] is False
    assert not any(key.startswith("prompt_worker.masked.") for key in second)
    assert "prompt_worker.job_id" not in third and "prompt_worker.kind" not in third
    assert third["error.type"] == "invalid_job"
    assert third["prompt_worker.status"] == "error"
    assert [span.status.status_code for span in processes] == [
        StatusCode.UNSET,
        StatusCode.UNSET,
        StatusCode.ERROR,
    ]
    assert [event.name for event in processes[0].events] == ["decode", "budget"]
    assert len({hex_span(span) for span in processes}) == 3
    assert {hex_trace(span) for span in processes} == {PRODUCER_TRACE}


def test_a_reply_that_failed_marks_its_send_span_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    traced, memory, _ = tracing(monkeypatch)
    span = traced.process(
        None,
        queue="build-prompt",
        message_id="m-1",
        correlation_id=None,
        delivery_tag=1,
        redelivered=False,
        body_size=10,
    )
    failed = span.send("build-prompt.replies")
    failed.end(ConnectionError("channel closed"))
    again = span.send("build-prompt.replies")
    again.end()
    span.end()
    traced.shutdown()
    spans = memory.get_finished_spans()
    sends = {hex_span(s): s for s in spans if s.name.startswith("send ")}
    failed_id, again_id = (s.headers["traceparent"].split("-")[2] for s in (failed, again))
    assert set(sends) == {failed_id, again_id}
    assert sends[failed_id].status.status_code is StatusCode.ERROR
    assert [event.name for event in sends[failed_id].events] == ["exception"]
    assert sends[again_id].status.status_code is StatusCode.UNSET
    [process] = [s for s in spans if s.name == "process build-prompt"]
    assert all(parent_of(send) == hex_span(process) for send in sends.values())
    assert dict(process.attributes or {})["messaging.message.id"] == "m-1"


def test_the_renderer_times_its_phases_with_and_without_a_budget() -> None:
    job = json.loads(JOB.read_text())
    plain_job = Renderer().render(json.dumps(job).encode())
    assert [name for name, _, _ in plain_job.phases] == PHASES
    job["budget"] = {"max_prompt_tokens": 100_000}
    budgeted = Renderer().render(json.dumps(job).encode())
    assert [name for name, _, _ in budgeted.phases][-1] == "budget"
    for _, started, ended in budgeted.phases:
        assert started <= ended


# -- the exporters, through the environment, to a receiver --------------------------


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    client: dict[str, str] = field(default_factory=dict)  # its certificate's subject

    def request(self) -> ExportTraceServiceRequest:
        body = self.body
        if self.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        request: ExportTraceServiceRequest = ExportTraceServiceRequest.FromString(body)
        return request

    def span_names(self) -> list[str]:
        return [
            span.name
            for resource_spans in self.request().resource_spans
            for scope_spans in resource_spans.scope_spans
            for span in scope_spans.spans
        ]


class Receiver(ThreadingHTTPServer):
    """An OTLP/HTTP receiver: keeps what is posted; answers each post with the next of
    `statuses` (then 200); `hold` makes it wait before answering."""

    def __init__(self, statuses: Sequence[int] = (), tls: ssl.SSLContext | None = None) -> None:
        super().__init__(("127.0.0.1", 0), ReceiverHandler)
        self.scheme = "http"
        if tls is not None:
            self.socket = tls.wrap_socket(self.socket, server_side=True)
            self.scheme = "https"
        self.received: list[Received] = []
        self.statuses = list(statuses)
        self.hold = threading.Event()
        self.hold.set()
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.server_address[1]}"

    def close(self) -> None:
        self.hold.set()
        self.shutdown()
        self.server_close()


class ReceiverHandler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.hold.wait(30)
        received = Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        if isinstance(self.connection, ssl.SSLSocket):
            peer = self.connection.getpeercert() or {}
            subject = cast(tuple[tuple[tuple[str, str], ...], ...], peer.get("subject", ()))
            received.client = dict(name for names in subject for name in names)
        self.server.received.append(received)
        status = self.server.statuses.pop(0) if self.server.statuses else 200
        self.send_response(status)
        if status == 503:
            self.send_header("Retry-After", "0")
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()


def test_otlp_over_http_follows_the_exporters_variables(
    monkeypatch: pytest.MonkeyPatch, receiver: Receiver
) -> None:
    for name, value in {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_EXPORTER_OTLP_HEADERS": "api-key=s%3Dcret, x-team = sre",
        "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "gzip",
    }.items():
        monkeypatch.setenv(name, value)
    traced = start_tracing(os.environ)
    assert traced is not None
    render_one(traced, {"traceparent": TRACEPARENT})
    traced.shutdown()
    [posted] = receiver.received
    assert posted.path == "/v1/traces"
    assert posted.headers["api-key"] == "s=cret"
    assert posted.headers["x-team"] == "sre"
    assert posted.headers["content-encoding"] == "gzip"
    assert sorted(posted.span_names()) == ["process build-prompt", "send build-prompt.replies"]
    [resource_spans] = posted.request().resource_spans
    service = {kv.key: kv.value.string_value for kv in resource_spans.resource.attributes}
    assert service["service.name"] == "build-prompt-worker"


def test_otlp_over_https_checks_the_receiver_and_shows_the_client_certificate(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    authority = make_authority(tmp_path, "trace-ca")
    server = authority.issue(tmp_path, "receiver", "receiver", hosts=("127.0.0.1",))
    client = authority.issue(tmp_path, "worker", "prompt-worker", client=True)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(authority.cert))
    tls.load_cert_chain(server.cert, server.key)
    tls.verify_mode = ssl.CERT_REQUIRED
    https = Receiver(tls=tls)
    # requests, which the http/protobuf exporter posts with, lets these (set on some
    # machines for the system's bundle) override the exporter's CA file (TRACING.md).
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
    try:
        for name, value in {
            "OTEL_EXPORTER_OTLP_ENDPOINT": https.endpoint,
            "OTEL_EXPORTER_OTLP_CERTIFICATE": str(authority.cert),
            "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": str(client.cert),
            "OTEL_EXPORTER_OTLP_CLIENT_KEY": str(client.key),
        }.items():
            monkeypatch.setenv(name, value)
        traced = start_tracing(os.environ)
        assert traced is not None
        render_one(traced, None)
        traced.shutdown()
    finally:
        https.close()
    [posted] = https.received
    assert posted.client["commonName"] == "prompt-worker"
    assert sorted(posted.span_names()) == ["process build-prompt", "send build-prompt.replies"]


def test_a_receiver_answering_503_gets_the_batch_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = Receiver(statuses=[503])
    dropped: list[int] = []
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{server.endpoint}/custom")
        traced = start_tracing(os.environ, on_dropped=dropped.append)
        assert traced is not None
        render_one(traced, None)
        traced.shutdown()
    finally:
        server.close()
    first, second = server.received
    assert first.path == second.path == "/custom"
    assert first.body == second.body
    assert dropped == []


def test_a_receiver_that_is_down_costs_the_spans_and_counts_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    closed = Receiver()
    endpoint = closed.endpoint
    closed.close()  # nothing listens there any more
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")  # seconds, as the exporter reads it
    dropped: list[int] = []
    traced = start_tracing(os.environ, on_dropped=dropped.append)
    assert traced is not None
    for _ in range(3):
        render_one(traced, None)
    traced.shutdown()
    assert sum(dropped) == 3 * 2  # a process span and a send span each


class StuckExporter(SpanExporter):
    """An exporter whose first export waits until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.exported: list[ReadableSpan] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.release.wait(30)
        self.exported.extend(spans)
        return SpanExportResult.SUCCESS


def test_a_receiver_that_does_not_answer_costs_spans_not_waiting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "4")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "10")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "1")
    stuck = StuckExporter()
    dropped: list[int] = []
    traced = JobTracing.from_environment(os.environ, on_dropped=dropped.append, exporters=[stuck])
    started = time.monotonic()
    for tag in range(20):
        process_one(traced, tag).end()
    # Nothing waited for the exporter: the spans that did not fit were dropped.
    assert time.monotonic() - started < 10
    assert sum(dropped) >= 20 - 4 - 1
    stuck.release.set()
    traced.shutdown()
    # Every span was exported or counted. (The SDK counts a span dropped when the queue
    # is full as it arrives; should its export thread take one out at that moment, the
    # count is one more than was really lost.)
    assert 20 <= len(stuck.exported) + sum(dropped) <= 21


def test_console_prints_each_span_as_json() -> None:
    # In a process of its own: the console exporter writes to the sys.stdout it was
    # given when its module was imported.
    code = f"""
import os
from tests.ops.test_tracing import render_one
from worker.ops.tracing import start_tracing
traced = start_tracing(os.environ)
render_one(traced, {{"traceparent": "{TRACEPARENT}"}})
traced.shutdown()
"""
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "console"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True
    )
    by_name = {span["name"]: span for span in json_objects(out.stdout)}
    assert set(by_name) == {"process build-prompt", "send build-prompt.replies"}
    assert by_name["process build-prompt"]["parent_id"] == f"0x{PRODUCER_SPAN}"
    assert [e["name"] for e in by_name["process build-prompt"]["events"]] == PHASES


def json_objects(text: str) -> list[dict[str, Any]]:
    """The JSON objects in `text`, one after another (the console exporter's spans)."""
    decoder, found = json.JSONDecoder(), []
    position = text.find("{")
    while position != -1:
        value, end = decoder.raw_decode(text, position)
        found.append(value)
        position = text.find("{", end)
    return found
