"""One trace from producer to LLM caller, read back from a real trace server.

A `serve` worker with tracing turned on by the standard `OTEL_*` variables exports to
Arize Phoenix (scripts/phoenix) over OTLP, by http/protobuf and by gRPC. The test plays
both ends of the pipeline: it publishes a job under a producer span of its own, with
the span's `traceparent` on the job's headers, and consumes the reply under a span
whose parent is the reply's `traceparent`. Phoenix's REST API must then hold one trace
with the producer's span, the worker's process span (the render's phases its events),
the reply's send span and the test's consumer span, each the child of the one before.
The Go producer (amqp091-go and OpenTelemetry's Go SDK) sets a traceparent the worker
continues too. With `OTEL_TRACES_EXPORTER=console` the worker prints a job's spans,
and spans it cannot deliver are counted in its metrics.
"""

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aio_pika
import aiohttp
import pytest
from aio_pika.abc import AbstractIncomingMessage
from opentelemetry import context, trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    TraceFlags,
    set_span_in_context,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from tests.integration.helpers import AMQP_URL, REPO, StartWorker, free_port, wait_for
from tests.unavailable import missing
from worker.transport.link.topology import Topology
from worker.transport.producers.client import PromptClient

pytestmark = [pytest.mark.slow, pytest.mark.broker]

PHOENIX = REPO / "scripts" / "phoenix"
GOPRODUCER = REPO / "tests" / "integration" / "goproducer"
JOB = REPO / "tests" / "bench_jobs" / "typical_react_job.json"
PROPAGATOR = TraceContextTextMapPropagator()
PRODUCER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PRODUCER_SPAN = "00f067aa0ba902b7"


class Phoenix:
    """A Phoenix server on 127.0.0.1:`port`, each test in a project of its own."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.endpoint = f"http://127.0.0.1:{port}"

    async def spans(self, project: str, trace_id: str) -> list[dict[str, Any]]:
        url = f"{self.endpoint}/v1/projects/{project}/spans"
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
            session.get(url, params={"limit": "1000"}) as response,
        ):
            if response.status == 404:  # no span of the project has arrived yet
                return []
            response.raise_for_status()
            found: list[dict[str, Any]] = (await response.json())["data"]
        return [span for span in found if span["context"]["trace_id"] == trace_id]

    async def wait_for(
        self, project: str, trace_id: str, names: set[str], within: float = 60.0
    ) -> dict[str, dict[str, Any]]:
        """The trace's spans by name, once all of `names` have arrived."""
        deadline = time.monotonic() + within
        while True:
            spans = {span["name"]: span for span in await self.spans(project, trace_id)}
            if names <= set(spans) or time.monotonic() > deadline:
                return spans
            await asyncio.sleep(0.5)


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    directory = tmp_path_factory.mktemp("phoenix")
    port = free_port()
    started = subprocess.run(
        [str(PHOENIX), "start", str(directory), str(port)], capture_output=True, text=True
    )
    if started.returncode != 0:
        missing("Arize Phoenix", f"scripts/phoenix install ({started.stderr.strip()[-300:]})")
    try:
        yield Phoenix(port)
    finally:
        subprocess.run([str(PHOENIX), "stop", str(directory)], check=False)


def tracing_env(phoenix: Phoenix, project: str, protocol: str = "http/protobuf") -> dict[str, str]:
    return {
        # Phoenix takes gRPC on the port beside its HTTP one (scripts/phoenix).
        "OTEL_EXPORTER_OTLP_ENDPOINT": phoenix.endpoint
        if protocol == "http/protobuf"
        else f"http://127.0.0.1:{phoenix.port + 1}",
        "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
        "OTEL_SERVICE_NAME": "build-prompt-worker",
        # Phoenix files spans by this resource attribute; a project per test.
        "OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={project}",
        "OTEL_BSP_SCHEDULE_DELAY": "200",
    }


def pipeline_tracer(phoenix: Phoenix, project: str) -> tuple[TracerProvider, trace.Tracer]:
    """The producer's and the LLM caller's tracer, exporting to the same project."""
    provider = TracerProvider(
        resource=Resource.create(
            {"service.name": "pipeline-test", "openinference.project.name": project}
        )
    )
    exporter = OTLPSpanExporter(endpoint=f"{phoenix.endpoint}/v1/traces")
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, provider.get_tracer("pipeline-test")


def hex_id(value: int, width: int) -> str:
    return format(value, f"0{width}x")


async def publish_traced_job(
    tracer: trace.Tracer, queue: str, replies: str, correlation_id: str
) -> tuple[trace.Span, AbstractIncomingMessage]:
    """Publish the typical job under a producer span of the test's; its reply."""
    connection = await aio_pika.connect(AMQP_URL)
    async with connection:
        channel = await connection.channel()
        reply_queue = await channel.declare_queue(replies, exclusive=True)
        with tracer.start_as_current_span("send build-prompt", kind=SpanKind.PRODUCER) as sent:
            headers: dict[str, str] = {}
            PROPAGATOR.inject(headers)
            await channel.default_exchange.publish(
                aio_pika.Message(
                    JOB.read_bytes(),
                    headers=dict(headers),
                    reply_to=reply_queue.name,
                    correlation_id=correlation_id,
                ),
                routing_key=queue,
            )
        message = await wait_for_message(reply_queue)
        await message.ack()
    return sent, message


def header_texts(message: AbstractIncomingMessage) -> dict[str, str]:
    return {
        key: value.decode() if isinstance(value, bytes) else str(value)
        for key, value in (message.headers or {}).items()
    }


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
async def test_one_trace_runs_from_the_producer_through_the_worker_to_the_llm_caller(
    phoenix: Phoenix, start_worker: StartWorker, topo: Topology, protocol: str
) -> None:
    project = f"trace-{uuid.uuid4().hex[:8]}"
    worker = start_worker(env=tracing_env(phoenix, project, protocol))
    await worker.wait_ready()
    provider, tracer = pipeline_tracer(phoenix, project)
    replies = f"{topo.request_queue}.test-replies"
    sent, message = await publish_traced_job(tracer, topo.request_queue, replies, "c-trace")
    parent = PROPAGATOR.extract(header_texts(message))
    with tracer.start_as_current_span(f"process {replies}", context=parent, kind=SpanKind.CONSUMER):
        assert json.loads(message.body)["status"] == "ok"
    provider.shutdown()

    trace_id = hex_id(sent.get_span_context().trace_id, 32)
    process_name = f"process {topo.request_queue}"
    send_name = f"send {replies}"
    names = {"send build-prompt", process_name, send_name, f"process {replies}"}
    spans = await phoenix.wait_for(project, trace_id, names)
    assert names <= set(spans), f"spans in Phoenix: {sorted(spans)}"

    def parent_of(name: str) -> str | None:
        parent_id: str | None = spans[name]["parent_id"]
        return parent_id

    def span_id(name: str) -> str:
        value: str = spans[name]["context"]["span_id"]
        return value

    assert parent_of(process_name) == hex_id(sent.get_span_context().span_id, 16)
    assert parent_of(send_name) == span_id(process_name)
    assert parent_of(f"process {replies}") == span_id(send_name)
    events = [event["name"] for event in spans[process_name]["events"]]
    assert events == ["decode", "mask", "validate", "build"]
    attributes = spans[process_name]["attributes"]
    flat = json.dumps(attributes)
    assert "rabbitmq" in flat and "react" in flat and "tarsy" in flat
    # Phoenix's span_kind is OpenInference's; the messaging operation says what it was.
    assert '"process"' in flat
    assert '"send"' in json.dumps(spans[send_name]["attributes"])
    assert spans[process_name]["status_code"] != "ERROR"


async def test_with_the_console_exporter_serve_prints_a_jobs_spans(
    start_worker: StartWorker, topo: Topology
) -> None:
    worker = start_worker(env={"OTEL_TRACES_EXPORTER": "console", "OTEL_BSP_SCHEDULE_DELAY": "100"})
    await worker.wait_ready()
    provider = TracerProvider()
    replies = f"{topo.request_queue}.test-replies"
    sent, message = await publish_traced_job(
        provider.get_tracer("pipeline-test"), topo.request_queue, replies, "c-console"
    )
    assert json.loads(message.body)["status"] == "ok"
    process_name, send_name = f"process {topo.request_queue}", f"send {replies}"

    async def printed() -> bool:
        return {process_name, send_name} <= {
            span.get("name") for span in json_objects(worker.logs())
        }

    await wait_for(printed, 30, "the worker to print its spans")
    spans = {span.get("name"): span for span in json_objects(worker.logs())}
    process, send = spans[process_name], spans[send_name]
    producer = sent.get_span_context()
    assert process["context"]["trace_id"] == f"0x{hex_id(producer.trace_id, 32)}"
    assert process["parent_id"] == f"0x{hex_id(producer.span_id, 16)}"
    assert process["kind"] == "SpanKind.CONSUMER"
    assert [event["name"] for event in process["events"]] == ["decode", "mask", "validate", "build"]
    assert send["parent_id"] == process["context"]["span_id"]
    reply_parent = header_texts(message)["traceparent"].split("-")[2]
    assert send["context"]["span_id"] == f"0x{reply_parent}"
    assert process["resource"]["attributes"]["service.name"] == "build-prompt-worker"


def json_objects(text: str) -> list[dict[str, Any]]:
    """The JSON objects in `text` (the console exporter's spans, each over many lines,
    among the worker's one-line log records)."""
    decoder, found = json.JSONDecoder(), []
    position = text.find("{")
    while position != -1:
        try:
            value, end = decoder.raw_decode(text, position)
        except json.JSONDecodeError:
            end = position + 1
        else:
            found.append(value)
        position = text.find("{", end)
    return found


async def test_spans_a_receiver_never_gets_are_counted_in_the_metrics(
    start_worker: StartWorker, topo: Topology
) -> None:
    nobody = free_port()  # nothing listens there
    worker = start_worker(
        env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{nobody}",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "1",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        }
    )
    await worker.wait_ready()
    async with PromptClient(AMQP_URL, request_queue=topo.request_queue) as client:
        for _ in range(3):
            reply = json.loads(await client.call(JOB.read_bytes(), timeout=60))
            assert reply["status"] == "ok"
    # A process span and a send span a job.
    await worker.metrics_showing("prompt_worker_trace_spans_dropped_total 6.0", within=60)


@pytest.fixture(scope="module")
def goproducer() -> Path:
    built = subprocess.run([str(GOPRODUCER / "build")], capture_output=True, text=True)
    if built.returncode != 0:
        missing("the Go producer", f"tests/integration/goproducer/build: {built.stderr[-300:]}")
    return GOPRODUCER / "goproducer"


async def test_a_go_producers_traceparent_is_continued_by_the_worker(
    phoenix: Phoenix, start_worker: StartWorker, topo: Topology, goproducer: Path
) -> None:
    project = f"go-{uuid.uuid4().hex[:8]}"
    worker = start_worker(env=tracing_env(phoenix, project))
    await worker.wait_ready()
    produced = await asyncio.to_thread(
        subprocess.run,
        [str(goproducer), AMQP_URL, topo.request_queue],
        input=JOB.read_bytes(),
        capture_output=True,
        timeout=90,
        check=True,
    )
    go = json.loads(produced.stdout)
    assert go["reply_status"] == "ok"
    version, reply_trace, reply_parent, flags = go["reply_traceparent"].split("-")
    # Sampled; SDK releases differ in the other flags (the random trace id flag).
    assert (version, reply_trace, int(flags, 16) & 1) == ("00", go["trace_id"], 1)
    assert reply_parent != go["span_id"]

    process_name = f"process {topo.request_queue}"
    spans = await phoenix.wait_for(project, go["trace_id"], {process_name})
    assert process_name in spans, f"spans in Phoenix: {sorted(spans)}"
    assert spans[process_name]["parent_id"] == go["span_id"]


def test_the_phoenix_script_refuses_a_bad_call() -> None:
    result = subprocess.run([str(PHOENIX), "start"], capture_output=True, text=True)
    assert result.returncode == 2
    assert "usage: scripts/phoenix start DIR PORT" in result.stderr


async def test_prompt_client_puts_the_callers_trace_context_on_its_jobs(topo: Topology) -> None:
    """No worker: the test reads the job PromptClient published and answers it itself."""
    caller = SpanContext(
        int(PRODUCER_TRACE, 16),
        int(PRODUCER_SPAN, 16),
        is_remote=False,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    connection = await aio_pika.connect(AMQP_URL)
    async with connection, PromptClient(AMQP_URL, request_queue=topo.request_queue) as client:
        channel = await connection.channel()
        requests = await channel.declare_queue(topo.request_queue, auto_delete=True)
        token = context.attach(set_span_in_context(NonRecordingSpan(caller)))
        try:
            call = asyncio.ensure_future(client.call(b"{}", timeout=60))
        finally:
            context.detach(token)
        job = await wait_for_message(requests)
        assert job.headers["traceparent"] == f"00-{PRODUCER_TRACE}-{PRODUCER_SPAN}-01"
        assert job.reply_to is not None
        await channel.default_exchange.publish(
            aio_pika.Message(b'{"status": "ok"}', correlation_id=job.correlation_id),
            routing_key=job.reply_to,
        )
        await job.ack()
        assert await call == b'{"status": "ok"}'
        # Outside any span nothing is put on a job.
        plain = asyncio.ensure_future(client.call(b"{}", timeout=60))
        job = await wait_for_message(requests)
        assert "traceparent" not in (job.headers or {})
        await channel.default_exchange.publish(
            aio_pika.Message(b"{}", correlation_id=job.correlation_id),
            routing_key=job.reply_to or "",
        )
        await job.ack()
        await plain


async def wait_for_message(
    queue: aio_pika.abc.AbstractQueue,
) -> aio_pika.abc.AbstractIncomingMessage:
    for _ in range(240):
        message = await queue.get(fail=False)
        if message is not None:
            return message
        await asyncio.sleep(0.25)
    raise AssertionError("no job published")


async def test_rerender_broker_puts_its_own_span_in_front_of_the_workers(
    phoenix: Phoenix, start_worker: StartWorker, topo: Topology, tmp_path: Path
) -> None:
    project = f"producers-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, **tracing_env(phoenix, project)}
    worker = start_worker(env=tracing_env(phoenix, project))
    await worker.wait_ready()
    source, out = tmp_path / "jobs.jsonl", tmp_path / "out.jsonl"
    source.write_bytes(JOB.read_bytes().replace(b"\n", b"") + b"\n")
    rerender = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "-m",
            "worker",
            "rerender",
            str(source),
            "--out",
            str(out),
            "--progress",
            "off",
            f"--broker={AMQP_URL}",
            "--request-queue",
            topo.request_queue,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert rerender.returncode == 0, rerender.stderr
    send_name, process_name = f"send {topo.request_queue}", f"process {topo.request_queue}"

    async def trace_of(name: str) -> dict[str, dict[str, Any]]:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            url = f"{phoenix.endpoint}/v1/projects/{project}/spans"
            async with (
                aiohttp.ClientSession() as session,
                session.get(url, params={"limit": "1000"}) as response,
            ):
                found = (await response.json())["data"] if response.status == 200 else []
            sends = [span for span in found if span["name"] == name]
            if sends:
                trace_id = sends[0]["context"]["trace_id"]
                spans = await phoenix.wait_for(project, trace_id, {name, process_name})
                if process_name in spans:
                    return spans
            await asyncio.sleep(0.5)
        raise AssertionError(f"no trace with {name!r} and {process_name!r}")

    spans = await trace_of(send_name)
    assert spans[send_name]["parent_id"] is None
    assert spans[process_name]["parent_id"] == spans[send_name]["context"]["span_id"]
