"""Logging: JSON lines by default, console for people, and no payload text below debug."""

import io
import json
import logging
from collections.abc import Iterator
from typing import Any, cast

import orjson
import pytest
import structlog
from aiormq.abc import AbstractChannel, DeliveredMessage
from pamqp.commands import Basic
from pamqp.header import ContentHeader

from worker.ops.logs import configure_logging, format_exception, get_logger, payload_logging_enabled
from worker.ops.metrics import Metrics
from worker.render.renderer import Renderer
from worker.transport.consumer.acks import BatchedAcks
from worker.transport.consumer.delivery import Decision, Delivery
from worker.transport.consumer.worker import Worker
from worker.transport.settings import Settings

CANARY = "CANARY-7f3c-do-not-log"


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    yield
    structlog.reset_defaults()
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_lines_by_default() -> None:
    stream = io.StringIO()
    configure_logging("info", None, stream)
    get_logger(component="test").info("hello", answer=42)
    [line] = lines(stream)
    assert line["event"] == "hello"
    assert line["answer"] == 42
    assert line["level"] == "info"
    assert line["component"] == "test"
    assert line["timestamp"].endswith("Z")


def test_console_on_a_terminal_unless_json_is_asked_for() -> None:
    terminal = _Terminal()
    configure_logging("info", None, terminal)
    get_logger().info("hello")
    assert "hello" in terminal.getvalue()
    with pytest.raises(json.JSONDecodeError):
        json.loads(terminal.getvalue().splitlines()[0])

    forced = _Terminal()
    configure_logging("info", "json", forced)
    get_logger().info("hello")
    assert lines(forced)[0]["event"] == "hello"


def test_level_filters() -> None:
    stream = io.StringIO()
    configure_logging("warning", "json", stream)
    get_logger().info("quiet")
    get_logger().warning("loud")
    assert [line["event"] for line in lines(stream)] == ["loud"]


def test_library_logs_share_the_format() -> None:
    stream = io.StringIO()
    configure_logging("debug", "json", stream)
    logging.getLogger("aio_pika.robust_connection").warning("reconnecting in %s s", 2)
    [line] = lines(stream)
    assert line["event"] == "reconnecting in 2 s"
    assert line["logger"] == "aio_pika.robust_connection"
    assert line["level"] == "warning"


def _raise_with_payload() -> None:
    fields: dict[str, str] = {}
    try:
        fields[CANARY]  # the KeyError quoting job data is the point
    except KeyError as exc:
        raise RuntimeError(f"while rendering {CANARY}") from exc


def test_stack_traces_withhold_exception_messages_below_debug() -> None:
    with pytest.raises(RuntimeError) as raised:
        _raise_with_payload()
    trace = format_exception(raised.value, include_messages=False)
    assert "_raise_with_payload" in trace
    assert "builtins.KeyError" in trace
    assert "builtins.RuntimeError" in trace
    assert CANARY not in trace
    assert CANARY in format_exception(raised.value, include_messages=True)


def _delivery(body: bytes) -> Delivery:
    """A delivery as aiormq hands it to the worker, with a reply_to."""
    message = DeliveredMessage(
        delivery=Basic.Deliver(consumer_tag="ctag", delivery_tag=1),
        header=ContentHeader(
            properties=Basic.Properties(reply_to="amq.gen-client", headers={}),
            body_size=len(body),
        ),
        body=body,
        # No channel: these tests never settle or publish on it.
        channel=cast(AbstractChannel, None),
    )
    return Delivery(message, received=0.0, attempt=0, acks=BatchedAcks(None), tag=1)


@pytest.mark.parametrize("level", ["info", "debug"])
def test_the_job_line_holds_facts_not_payload(level: str) -> None:
    stream = io.StringIO()
    configure_logging(level, "json", stream)
    assert payload_logging_enabled() is (level == "debug")
    renderer = Renderer()
    worker = Worker(Settings(http_port=0), renderer, Metrics("test"))
    body = orjson.dumps(
        {
            "job_id": "j-1",
            "kind": "react",
            "session": {"alert_data": CANARY, "runbook_content": CANARY},
            "stage": {"custom_instructions": CANARY},
        }
    )
    outcome = renderer.render(body)
    assert outcome.ok

    delivery = _delivery(body)
    worker.deliveries.report.log_job(delivery, Decision(outcome, "ack", offloaded=False), "acked")

    [line] = lines(stream)
    assert line["event"] == "job"
    assert line["job_id"] == "j-1"
    assert line["kind"] == "react"
    assert line["status"] == "ok"
    assert line["code"] is None
    assert line["request_bytes"] == len(body)
    assert line["prompt_chars"] == outcome.prompt_chars > 0
    assert line["duration_ms"] >= 0
    if level == "info":
        assert CANARY not in stream.getvalue()
    else:
        assert CANARY in line["request"]


def test_an_unknown_kind_is_not_echoed_into_logs() -> None:
    stream = io.StringIO()
    configure_logging("info", "json", stream)
    renderer = Renderer()
    worker = Worker(Settings(http_port=0), renderer, Metrics("test"))
    body = orjson.dumps({"job_id": "j-2", "kind": CANARY})
    outcome = renderer.render(body)
    delivery = _delivery(body)
    worker.deliveries.report.log_job(
        delivery, Decision(outcome, "dead_letter", offloaded=False), "dead_lettered"
    )
    [line] = lines(stream)
    assert line["kind"] == "unknown"
    assert line["code"] == "invalid_job"
    assert CANARY not in stream.getvalue()


class _BrokenPipe(io.StringIO):
    """A log stream whose reader went away; it remembers what it was asked to write."""

    def __init__(self) -> None:
        super().__init__()
        self.attempts: list[str] = []

    def write(self, text: str) -> int:
        self.attempts.append(text)
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_closed_log_stream_never_stops_the_worker(capsys: pytest.CaptureFixture[str]) -> None:
    stream = _BrokenPipe()
    configure_logging("info", "json", stream)
    get_logger().info("lost")  # raises nothing
    logging.getLogger("asyncio").error("lost too")
    get_logger().info("still lost")
    # Every event was written (and lost), none raised, and the standard library did not
    # report a "Logging error" with a traceback on the real stderr either.
    written = "".join(stream.attempts)
    assert all(f'"{event}"' in written for event in ("lost", "lost too", "still lost")), written
    assert capsys.readouterr().err == ""


def test_json_lines_beneath_stderr_keep_their_order_with_library_logs() -> None:
    # stderr is a line-buffered text stream over a binary buffer: structlog's lines go
    # to the buffer as bytes, the standard library's through the text layer.
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="utf-8", line_buffering=True)
    configure_logging("info", "json", stream)
    get_logger(component="test").info("first", note="é ✓")
    logging.getLogger("asyncio").warning("second")
    get_logger().info("third")
    stream.flush()
    events = [json.loads(line) for line in raw.getvalue().decode().splitlines()]
    assert [e["event"] for e in events] == ["first", "second", "third"]
    assert events[0]["note"] == "é ✓"
    assert events[1]["logger"] == "asyncio"


def test_the_broker_libraries_speak_at_debug_only() -> None:
    """The worker reports connection events in its own lines; the libraries' lines about
    the same events show only at debug level."""
    stream = io.StringIO()
    configure_logging("info", "json", stream)
    logging.getLogger("aiormq.connection").error("error when creating transport")
    logging.getLogger("aio_pika.channel").warning("channel closed")
    assert lines(stream) == []
    configure_logging("debug", "json", stream)
    logging.getLogger("aiormq.connection").warning("shown at debug")
    assert [line["event"] for line in lines(stream)] == ["shown at debug"]
