"""Tracing: when the `OTEL_*` variables turn it on, the spans of one job, and the bounded
export queue. Spans are read back from the SDK's in-memory exporter."""

import itertools
import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from opentelemetry.sdk.trace.sampling import Decision, ParentBased, TraceIdRatioBased
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context

from worker.errors import ConfigError
from worker.ops.otel import (
    JobTracing,
    OtlpHttpReceiver,
    Parent,
    QueueSettings,
    Sampler,
    key_value,
    parse_traceparent,
)
from worker.ops.tracing import start_tracing, tracing_requested
from worker.render.renderer import Renderer

REPO = Path(__file__).resolve().parents[2]
PRODUCER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PRODUCER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{PRODUCER_TRACE}-{PRODUCER_SPAN}-01"


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "x", "OTEL_TRACES_SAMPLER": "always_on"}, False),
        ({"OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
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


def test_an_unknown_exporter_is_a_configuration_error() -> None:
    with pytest.raises(ConfigError, match="OTEL_TRACES_EXPORTER='zipkin'"):
        start_tracing({"OTEL_TRACES_EXPORTER": "zipkin"})


def test_a_bad_queue_size_is_a_configuration_error() -> None:
    with pytest.raises(ConfigError, match="OTEL_BSP_MAX_QUEUE_SIZE"):
        QueueSettings.from_environment({"OTEL_BSP_MAX_QUEUE_SIZE": "lots"})


@pytest.mark.parametrize(
    ("environ", "match"),
    [
        ({"OTEL_TRACES_EXPORTER": "console"}, "OTEL_TRACES_EXPORTER='console'"),
        ({"OTEL_TRACES_SAMPLER": "sometimes"}, "OTEL_TRACES_SAMPLER='sometimes'"),
        (
            {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"},
            "OTEL_TRACES_SAMPLER_ARG",
        ),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "http/protobuf"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "ftp://x"}, "http:// or https://"),
        ({"OTEL_EXPORTER_OTLP_COMPRESSION": "zstd"}, "gzip or none"),
    ],
)
def test_settings_tracing_cannot_follow_are_configuration_errors(
    environ: dict[str, str], match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        start_tracing({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", **environ})


def test_the_receiver_follows_the_standard_variables() -> None:
    receiver = OtlpHttpReceiver(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector.example:4318/",
            "OTEL_EXPORTER_OTLP_HEADERS": "api-key=s%3Dcret, x-team = sre",
            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "2500",
            "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
        }
    )
    assert (receiver.url.hostname, receiver.url.port, receiver.path) == (
        "collector.example",
        4318,
        "/v1/traces",
    )
    assert receiver.headers["api-key"] == "s=cret"
    assert receiver.headers["x-team"] == "sre"
    assert receiver.headers["Content-Encoding"] == "gzip"
    assert receiver.timeout == 2.5
    assert receiver.context is not None
    default = OtlpHttpReceiver({})
    assert (default.url.hostname, default.url.port, default.path) == (
        "localhost",
        4318,
        "/v1/traces",
    )
    exact = OtlpHttpReceiver({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://h:9/custom"})
    assert exact.path == "/custom"


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


class CapturingReceiver:
    """Decodes what the worker sends with OpenTelemetry's own protobuf classes."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []

    def send(self, body: bytes) -> None:
        self.requests.append(ExportTraceServiceRequest.FromString(body))

    def all_spans(self) -> list[Span]:
        return [
            span
            for request in self.requests
            for resource_spans in request.resource_spans
            for scope_spans in resource_spans.scope_spans
            for span in scope_spans.spans
        ]

    def spans(self) -> dict[str, Span]:
        """By name: the last span of each name."""
        return {span.name: span for span in self.all_spans()}

    def resource(self) -> dict[str, object]:
        [resource_spans] = [rs for request in self.requests for rs in request.resource_spans][:1]
        return {kv.key: plain(kv.value) for kv in resource_spans.resource.attributes}


def plain(value: AnyValue) -> object:
    return getattr(value, value.WhichOneof("value") or "string_value")


def attributes(span: Span) -> dict[str, object]:
    return {kv.key: plain(kv.value) for kv in span.attributes}


def tracing(
    receiver: CapturingReceiver | None = None, **environ: str
) -> tuple[JobTracing, CapturingReceiver, list[str]]:
    receiver = receiver or CapturingReceiver()
    ignored: list[str] = []
    traced = JobTracing.from_environment(
        {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SERVICE_NAME": "w", **environ},
        log_ignored=ignored.append,
        receiver=receiver,
    )
    return traced, receiver, ignored


def finished(traced: JobTracing, receiver: CapturingReceiver) -> dict[str, Span]:
    traced.shutdown()
    return receiver.spans()


def render_one(
    traced: JobTracing, headers: dict[str, object] | None, body: bytes | None = None
) -> dict[str, str]:
    """What the consumer does with one delivery; the reply's headers."""
    if body is None:
        body = (REPO / "tests/bench_jobs/typical_react_job.json").read_bytes()
    span = traced.process(
        headers,
        queue="build-prompt",
        message_id="m-1",
        correlation_id="c-1",
        delivery_tag=7,
        redelivered=False,
        body_size=len(body),
    )
    outcome = Renderer().render(body)
    span.rendered(outcome)
    send = span.send("build-prompt.replies")
    send.end()
    span.end()
    return send.headers


def test_a_jobs_spans_continue_the_producers_trace_and_hand_it_to_the_reply() -> None:
    traced, receiver, ignored = tracing()
    reply_headers = render_one(
        traced, {"traceparent": TRACEPARENT.encode(), "tracestate": "vendor=1", "x-other": 1}
    )
    spans = finished(traced, receiver)

    assert ignored == []
    process = spans["process build-prompt"]
    assert process.kind == Span.SPAN_KIND_CONSUMER
    assert process.parent_span_id.hex() == PRODUCER_SPAN
    assert process.trace_state == "vendor=1"
    assert {span.trace_id.hex() for span in spans.values()} == {PRODUCER_TRACE}
    assert set(spans) == {
        "process build-prompt",
        "decode",
        "mask",
        "validate",
        "build",
        "send build-prompt.replies",
    }
    for name in ("decode", "mask", "validate", "build", "send build-prompt.replies"):
        assert spans[name].parent_span_id == process.span_id
        assert spans[name].start_time_unix_nano <= spans[name].end_time_unix_nano
    send = spans["send build-prompt.replies"]
    assert send.kind == Span.SPAN_KIND_PRODUCER
    assert reply_headers == {
        "traceparent": f"00-{PRODUCER_TRACE}-{send.span_id.hex()}-01",
        "tracestate": "vendor=1",
    }
    found = attributes(process)
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
    assert attributes(send)["messaging.operation.type"] == "send"
    assert receiver.resource()["service.name"] == "w"


def test_phases_follow_one_another_in_time_within_the_process_span() -> None:
    traced, receiver, _ = tracing()
    render_one(traced, None)
    spans = finished(traced, receiver)
    order = ["decode", "mask", "validate", "build", "send build-prompt.replies"]
    for earlier, later in itertools.pairwise(order):
        assert spans[earlier].end_time_unix_nano <= spans[later].start_time_unix_nano
    process = spans["process build-prompt"]
    assert process.start_time_unix_nano <= spans["decode"].start_time_unix_nano
    assert spans["send build-prompt.replies"].end_time_unix_nano <= process.end_time_unix_nano


def test_an_error_reply_marks_the_process_span_an_error() -> None:
    traced, receiver, _ = tracing()
    render_one(traced, None, b"not json")
    process = finished(traced, receiver)["process build-prompt"]
    assert process.status.code == Status.STATUS_CODE_ERROR
    assert attributes(process)["error.type"] == "invalid_json"


def test_no_span_carries_payload_text() -> None:
    traced, receiver, _ = tracing()
    job = json.loads((REPO / "tests/bench_jobs/typical_react_job.json").read_text())
    marker = "payload-text-that-must-stay-out-of-traces"
    job["session"]["alert_data"] = json.dumps({"note": marker})
    render_one(traced, None, json.dumps(job).encode())
    traced.shutdown()
    assert receiver.requests
    for request in receiver.requests:
        assert marker.encode() not in request.SerializeToString()


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
    traceparent: bytes,
) -> None:
    traced, receiver, ignored = tracing()
    render_one(traced, {"traceparent": traceparent})
    process = finished(traced, receiver)["process build-prompt"]
    assert process.parent_span_id == b""
    assert process.trace_id.hex() != PRODUCER_TRACE
    assert ignored == [traceparent.decode()]


def test_a_later_version_with_more_fields_is_read_as_the_spec_says() -> None:
    parent = parse_traceparent(f"01-{PRODUCER_TRACE}-{PRODUCER_SPAN}-01-more")
    assert parent == Parent(int(PRODUCER_TRACE, 16), int(PRODUCER_SPAN, 16), True, "")


def test_a_job_without_headers_starts_a_new_trace() -> None:
    traced, receiver, ignored = tracing()
    render_one(traced, None)
    process = finished(traced, receiver)["process build-prompt"]
    assert process.parent_span_id == b""
    assert len(process.trace_id) == 16
    assert ignored == []


def test_an_unsampled_job_records_nothing_but_hands_its_context_on() -> None:
    traced, receiver, _ = tracing()
    unsampled = f"00-{PRODUCER_TRACE}-{PRODUCER_SPAN}-00"
    reply_headers = render_one(traced, {"traceparent": unsampled})
    assert finished(traced, receiver) == {}
    version, trace_id, span_id, flags = reply_headers["traceparent"].split("-")
    assert (version, trace_id, flags) == ("00", PRODUCER_TRACE, "00")
    assert span_id != PRODUCER_SPAN


@given(
    rate=st.floats(min_value=0.0, max_value=1.0),
    trace_id=st.integers(min_value=1, max_value=(1 << 128) - 1),
    parent_sampled=st.sampled_from([None, True, False]),
)
def test_sampling_decides_as_the_sdks_samplers_do(
    rate: float, trace_id: int, parent_sampled: bool | None
) -> None:
    ratio = str(rate)
    parent = None
    context = None
    if parent_sampled is not None:
        parent = Parent(trace_id, 1, parent_sampled, "")
        flags = TraceFlags(TraceFlags.SAMPLED if parent_sampled else TraceFlags.DEFAULT)
        span_context = SpanContext(trace_id, 1, is_remote=True, trace_flags=flags)
        context = set_span_in_context(NonRecordingSpan(span_context))
    for name, sdk in (
        ("traceidratio", TraceIdRatioBased(rate)),
        ("parentbased_traceidratio", ParentBased(TraceIdRatioBased(rate))),
    ):
        ours = Sampler.from_environment(
            {"OTEL_TRACES_SAMPLER": name, "OTEL_TRACES_SAMPLER_ARG": ratio}
        )
        theirs = sdk.should_sample(context, trace_id, "x").decision == Decision.RECORD_AND_SAMPLE
        assert ours.sampled(parent, trace_id) is theirs


def test_attribute_values_of_every_type_decode_as_written() -> None:
    values: list[object] = ["text", True, False, 0, 7, -3, 2**40, 1.5]
    for value in values:
        encoded = key_value("k", value)
        span = Span.FromString(encoded)
        [kv] = span.attributes
        assert (kv.key, plain(kv.value)) == ("k", value)


def test_a_repeating_attribute_decodes_as_written_every_time_whatever_its_type() -> None:
    # Encoded once per (key, type, value): True and 1, or 1 and "1", stay apart.
    values: list[object] = [True, 1, "1", False, 0, "rabbitmq", True, 1, "1"]
    for value in values:
        span = Span.FromString(key_value("messaging.system", value))
        [kv] = span.attributes
        assert (kv.key, plain(kv.value), type(plain(kv.value))) == (
            "messaging.system",
            value,
            type(value),
        )


class StuckReceiver(CapturingReceiver):
    """A receiver that never answers until released."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def send(self, body: bytes) -> None:
        self.release.wait(30)
        super().send(body)


def test_a_receiver_that_does_not_answer_costs_spans_not_waiting() -> None:
    receiver = StuckReceiver()
    dropped: list[int] = []
    traced = JobTracing.from_environment(
        {
            "OTEL_BSP_MAX_QUEUE_SIZE": "4",
            "OTEL_BSP_SCHEDULE_DELAY": "10",
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "1",
        },
        on_dropped=dropped.append,
        receiver=receiver,
    )
    for _ in range(20):
        span = traced.process(
            None,
            queue="q",
            message_id=None,
            correlation_id=None,
            delivery_tag=1,
            redelivered=False,
            body_size=1,
        )
        span.end()
    # At most one span is in the receiver's hands and four wait: the rest are dropped.
    assert sum(dropped) >= 20 - 4 - 1
    receiver.release.set()
    traced.shutdown()
    assert len(receiver.requests) + sum(dropped) == 20


class RefusingReceiver:
    def send(self, body: bytes) -> None:
        raise ConnectionRefusedError("receiver down")


def test_a_receiver_that_is_down_drops_and_counts() -> None:
    dropped: list[int] = []
    traced = JobTracing.from_environment(
        {"OTEL_BSP_SCHEDULE_DELAY": "60000"},
        on_dropped=dropped.append,
        receiver=RefusingReceiver(),
    )
    for _ in range(3):
        render_one(traced, None)
    traced.shutdown()
    assert sum(dropped) == 3 * 6  # a process span, four phases and a send each


def test_the_renderer_times_its_phases_with_and_without_a_budget() -> None:
    job = json.loads((REPO / "tests/bench_jobs/typical_react_job.json").read_text())
    plain_job = Renderer().render(json.dumps(job).encode())
    assert [name for name, _, _ in plain_job.phases] == ["decode", "mask", "validate", "build"]
    job["budget"] = {"max_prompt_tokens": 100_000}
    budgeted = Renderer().render(json.dumps(job).encode())
    assert [name for name, _, _ in budgeted.phases][-1] == "budget"
    for _, started, ended in budgeted.phases:
        assert started <= ended


def test_a_producers_send_span_continues_the_context_it_is_given_or_starts_one() -> None:
    traced, receiver, _ = tracing()
    rooted = traced.send("build-prompt")
    rooted.end()
    child = traced.send("build-prompt", {"traceparent": TRACEPARENT, "tracestate": "v=1"})
    child.end()
    traced.shutdown()
    spans = receiver.all_spans()
    by_parent = {span.parent_span_id.hex(): span for span in spans}
    assert set(by_parent) == {"", PRODUCER_SPAN}
    assert by_parent[""].kind == Span.SPAN_KIND_PRODUCER
    assert by_parent[""].name == "send build-prompt"
    assert by_parent[PRODUCER_SPAN].trace_id.hex() == PRODUCER_TRACE
    assert child.headers == {
        "traceparent": f"00-{PRODUCER_TRACE}-{by_parent[PRODUCER_SPAN].span_id.hex()}-01",
        "tracestate": "v=1",
    }
    assert rooted.headers["traceparent"].split("-")[1] == by_parent[""].trace_id.hex()


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


def test_a_process_span_says_what_was_masked_and_trimmed_job_by_job() -> None:
    traced, receiver, _ = tracing()
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
        span = traced.process(
            {"traceparent": TRACEPARENT},
            queue="build-prompt",
            message_id=None,
            correlation_id=f"c-{tag}",
            delivery_tag=tag,
            redelivered=tag == 3,
            body_size=1000 * tag,
        )
        span.rendered(outcome)
        span.end()
    traced.shutdown()
    spans = receiver.all_spans()
    processes = [span for span in spans if span.name == "process build-prompt"]
    found = [attributes(span) for span in processes]
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
    assert [span.status.code for span in processes] == [
        Status.STATUS_CODE_UNSET,
        Status.STATUS_CODE_UNSET,
        Status.STATUS_CODE_ERROR,
    ]
    phases = {span.name: span for span in spans if span.parent_span_id == processes[0].span_id}
    assert set(phases) == {"decode", "budget"}
    assert phases["budget"].kind == Span.SPAN_KIND_INTERNAL
    assert len({span.span_id for span in spans}) == len(spans)
    assert {span.trace_id.hex() for span in spans} == {PRODUCER_TRACE}


def test_a_reply_that_failed_marks_its_send_span_an_error() -> None:
    traced, receiver, _ = tracing()
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
    spans = receiver.all_spans()
    sends = {span.span_id.hex(): span for span in spans if span.name.startswith("send ")}
    assert set(sends) == {
        failed.headers["traceparent"].split("-")[2],
        again.headers["traceparent"].split("-")[2],
    }
    by_header = {key: span.status.code for key, span in sends.items()}
    assert by_header[failed.headers["traceparent"].split("-")[2]] == Status.STATUS_CODE_ERROR
    assert by_header[again.headers["traceparent"].split("-")[2]] == Status.STATUS_CODE_UNSET
    [process] = [span for span in spans if span.name == "process build-prompt"]
    assert all(send.parent_span_id == process.span_id for send in sends.values())
    assert attributes(process)["messaging.message.id"] == "m-1"
