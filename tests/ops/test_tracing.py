"""Tracing: when the `OTEL_*` variables turn it on, the spans of one job, and the bounded
export queue. Spans are read back from the SDK's in-memory exporter."""

import itertools
import json
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from worker.errors import ConfigError
from worker.ops.otel import (
    JobTracing,
    QueueSettings,
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


def test_with_tracing_off_nothing_of_opentelemetry_is_imported() -> None:
    code = (
        "import sys, json\n"
        "import worker.commands.serve_cmd, worker.transport.consumer, worker.transport.client\n"
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


def tracing(exporter: SpanExporter, **limits: float) -> tuple[JobTracing, list[str]]:
    ignored: list[str] = []
    settings = {f"OTEL_BSP_{k.upper()}": str(v) for k, v in limits.items()}
    traced = JobTracing.from_environment(
        {"OTEL_TRACES_EXPORTER": "otlp", **settings},
        log_ignored=ignored.append,
        exporter=exporter,
    )
    return traced, ignored


def finished(traced: JobTracing, exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    traced.provider.force_flush()
    return {span.name: span for span in exporter.get_finished_spans()}


def render_one(
    traced: JobTracing, headers: dict[str, object] | None, body: bytes | None = None
) -> dict[str, str]:
    """What the consumer does with one delivery; the reply's headers."""
    if body is None:
        body = (REPO / "tests/bench_jobs/typical_react_job.json").read_bytes()
    outcome = Renderer().render(body)
    span = traced.process(
        headers,
        queue="build-prompt",
        message_id="m-1",
        correlation_id="c-1",
        delivery_tag=7,
        redelivered=False,
        body_size=len(body),
    )
    span.rendered(
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
    send = span.send("build-prompt.replies")
    reply_headers = send.headers
    send.end()
    span.end()
    return reply_headers


def test_a_jobs_spans_continue_the_producers_trace_and_hand_it_to_the_reply() -> None:
    exporter = InMemorySpanExporter()
    traced, ignored = tracing(exporter)
    reply_headers = render_one(traced, {"traceparent": TRACEPARENT.encode(), "x-other": 1})
    spans = finished(traced, exporter)

    assert ignored == []
    process = spans["process build-prompt"]
    assert process.kind is SpanKind.CONSUMER
    assert process.parent is not None
    assert format(process.parent.span_id, "016x") == PRODUCER_SPAN
    assert {format(s.context.trace_id, "032x") for s in spans.values()} == {PRODUCER_TRACE}
    assert set(spans) == {
        "process build-prompt",
        "decode",
        "mask",
        "validate",
        "build",
        "send build-prompt.replies",
    }
    for name in ("decode", "mask", "validate", "build", "send build-prompt.replies"):
        parent = spans[name].parent
        assert parent is not None and process.context is not None
        assert parent.span_id == process.context.span_id
    send = spans["send build-prompt.replies"]
    assert send.kind is SpanKind.PRODUCER
    assert reply_headers == {
        "traceparent": f"00-{PRODUCER_TRACE}-{format(send.context.span_id, '016x')}-01"
    }
    attributes = dict(process.attributes or {})
    assert attributes["messaging.system"] == "rabbitmq"
    assert attributes["messaging.operation.type"] == "process"
    assert attributes["messaging.rabbitmq.destination.routing_key"] == "build-prompt"
    assert attributes["messaging.message.id"] == "m-1"
    assert attributes["messaging.message.conversation_id"] == "c-1"
    assert attributes["prompt_worker.kind"] == "react"
    assert attributes["prompt_worker.family"] == "tarsy"
    assert str(attributes["prompt_worker.template_version"]).startswith("tarsy-")
    assert attributes["prompt_worker.status"] == "ok"


def test_phases_follow_one_another_in_time() -> None:
    exporter = InMemorySpanExporter()
    traced, _ = tracing(exporter)
    render_one(traced, None)
    spans = finished(traced, exporter)
    order = ["decode", "mask", "validate", "build"]
    for earlier, later in itertools.pairwise(order):
        ended, started = spans[earlier].end_time, spans[later].start_time
        assert ended is not None and started is not None
        assert ended <= started
    process = spans["process build-prompt"]
    assert process.start_time is not None and spans["decode"].start_time is not None


def test_no_span_carries_payload_text() -> None:
    exporter = InMemorySpanExporter()
    traced, _ = tracing(exporter)
    job = json.loads((REPO / "tests/bench_jobs/typical_react_job.json").read_text())
    marker = "payload-text-that-must-stay-out-of-traces"
    job["session"]["alert_data"] = json.dumps({"note": marker})
    render_one(traced, None, json.dumps(job).encode())
    spans = finished(traced, exporter)
    assert "process build-prompt" in spans
    for span in spans.values():
        for value in (span.attributes or {}).values():
            assert marker not in str(value)


@pytest.mark.parametrize(
    "traceparent",
    [b"garbage", b"00-00000000000000000000000000000000-00f067aa0ba902b7-01", b"00-xyz"],
)
def test_a_malformed_traceparent_starts_a_new_trace_with_one_debug_line(
    traceparent: bytes,
) -> None:
    exporter = InMemorySpanExporter()
    traced, ignored = tracing(exporter)
    render_one(traced, {"traceparent": traceparent})
    process = finished(traced, exporter)["process build-prompt"]
    assert process.parent is None
    assert format(process.context.trace_id, "032x") != PRODUCER_TRACE
    assert ignored == [traceparent.decode()]


def test_a_job_without_headers_starts_a_new_trace() -> None:
    exporter = InMemorySpanExporter()
    traced, ignored = tracing(exporter)
    render_one(traced, None)
    process = finished(traced, exporter)["process build-prompt"]
    assert process.parent is None
    assert ignored == []


class StuckReceiver(SpanExporter):
    """A receiver that never answers until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.exported = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.release.wait(30)
        self.exported += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.release.set()


def test_a_receiver_that_does_not_answer_costs_spans_not_waiting() -> None:
    receiver = StuckReceiver()
    dropped: list[int] = []
    traced = JobTracing.from_environment(
        {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_BSP_MAX_QUEUE_SIZE": "4",
            "OTEL_BSP_SCHEDULE_DELAY": "10",
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "1",
        },
        on_dropped=dropped.append,
        exporter=receiver,
    )
    for _ in range(20):
        traced.tracer.start_span("x").end()
    # At most one batch is in the receiver's hands and four wait: the rest are dropped.
    assert sum(dropped) >= 20 - 4 - 1
    receiver.release.set()
    traced.shutdown()
    assert receiver.exported + sum(dropped) == 20


class RefusingReceiver(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        raise ConnectionRefusedError("receiver down")

    def shutdown(self) -> None:
        pass


def test_a_receiver_that_is_down_drops_and_counts() -> None:
    dropped: list[int] = []
    traced = JobTracing.from_environment(
        {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_BSP_SCHEDULE_DELAY": "60000"},
        on_dropped=dropped.append,
        exporter=RefusingReceiver(),
    )
    for _ in range(3):
        traced.tracer.start_span("x").end()
    traced.provider.force_flush()
    assert sum(dropped) == 3
    traced.shutdown()


def test_the_renderer_times_its_phases_with_and_without_a_budget() -> None:
    job = json.loads((REPO / "tests/bench_jobs/typical_react_job.json").read_text())
    plain = Renderer().render(json.dumps(job).encode())
    assert [name for name, _, _ in plain.phases] == ["decode", "mask", "validate", "build"]
    job["budget"] = {"max_prompt_tokens": 100_000}
    budgeted = Renderer().render(json.dumps(job).encode())
    assert [name for name, _, _ in budgeted.phases][-1] == "budget"
    for _, started, ended in budgeted.phases:
        assert started <= ended
