"""Logging: structlog, one JSON object a line on stderr (or console lines for people).

JSON is the default; console rendering is used when stderr is a terminal or when
asked for. Library logs (aio-pika, aiormq, aiohttp, asyncio) go through the standard
`logging` module and are rendered the same way, so a log shipper sees one format.

Payload text (alert data, runbooks, histories) can hold secrets: nothing in the worker
logs it except at debug level, where `payload_logging_enabled()` says so.
"""

import contextlib
import logging
import sys
import traceback
from typing import Any, BinaryIO, TextIO, cast

import orjson
import structlog
from structlog.typing import EventDict, FilteringBoundLogger, Processor, WrappedLogger

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}
_state = {"payloads": False}


def _orjson_bytes(obj: Any, **_: Any) -> bytes:
    # default=str: a stray non-JSON value (a Path, an exception) must not kill a log line.
    return orjson.dumps(obj, default=str)


def _drop_color_message(_: WrappedLogger, __: str, event: EventDict) -> EventDict:
    # uvicorn/aiohttp-style duplicate of the message with ANSI codes.
    event.pop("color_message", None)
    return event


class _LossyStream:
    """A log stream that drops lines it cannot write instead of raising.

    Logging must never stop the worker: if stderr goes away (a closed pipe, a dead log
    collector), jobs keep being served and a signal still stops the worker cleanly.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except (OSError, ValueError):  # broken pipe, EIO, closed file
            return 0

    def flush(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._stream.flush()

    def isatty(self) -> bool:
        try:
            return self._stream.isatty()
        except (OSError, ValueError):
            return False


class _LineSink:
    """structlog's output: each rendered event becomes one line, written at once.

    The worker logs a line per job, so this is on the hot path. JSON lines arrive as
    orjson bytes and go straight to the binary buffer beneath a line-buffered text
    stream such as stderr (no decoding, no separate newline write); anything else is
    written as text. Like `_LossyStream`, it never raises.
    """

    __slots__ = ("_binary", "_text")

    def __init__(self, stream: TextIO) -> None:
        self._text = stream
        # Only beneath a line-buffered stream: then no text of the standard library's
        # handler can be waiting in it, and lines keep their order.
        buffer = getattr(stream, "buffer", None)
        line_buffered = getattr(stream, "line_buffering", False) is True
        self._binary: BinaryIO | None = buffer if line_buffered and buffer is not None else None

    def msg(self, message: str | bytes) -> None:
        try:
            if isinstance(message, bytes):
                if self._binary is not None:
                    self._binary.write(message + b"\n")
                    self._binary.flush()
                    return
                message = message.decode()
            self._text.write(f"{message}\n")
            self._text.flush()
        except (OSError, ValueError):  # broken pipe, EIO, closed file
            pass

    # structlog calls the method named after the level.
    debug = info = warning = warn = error = critical = exception = fatal = log = msg


def resolve_format(fmt: str | None, stream: TextIO) -> str:
    if fmt in ("json", "console"):
        return fmt
    isatty = getattr(stream, "isatty", None)
    return "console" if isatty is not None and isatty() else "json"


def configure_logging(
    level: str = "info", fmt: str | None = None, stream: TextIO | None = None
) -> None:
    """Configure structlog and the standard library for the whole process.

    `fmt` is "json", "console" or None (console on a terminal, else JSON); `stream`
    defaults to stderr.
    """
    target = stream if stream is not None else sys.stderr
    out = cast(TextIO, _LossyStream(target))
    numeric = _LEVELS.get(level, logging.INFO)
    _state["payloads"] = numeric <= logging.DEBUG
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: Processor
    # The standard library's handler needs text; structlog's own lines may be bytes.
    foreign_renderer: Processor
    if resolve_format(fmt, target) == "console":
        renderer = foreign_renderer = structlog.dev.ConsoleRenderer(colors=out.isatty())
        exc_processors: list[Processor] = []
    else:
        renderer = structlog.processors.JSONRenderer(serializer=_orjson_bytes)
        foreign_renderer = structlog.processors.JSONRenderer(
            serializer=lambda obj, **_: _orjson_bytes(obj).decode()
        )
        exc_processors = [structlog.processors.format_exc_info]

    structlog.configure(
        processors=[
            *shared,
            structlog.processors.StackInfoRenderer(),
            *exc_processors,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=lambda *_: _LineSink(target),
        cache_logger_on_first_use=True,
    )

    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name, _drop_color_message],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                *exc_processors,
                foreign_renderer,
            ],
        )
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric)
    # The broker client libraries speak at debug level only: the worker reports every
    # connection, channel and alarm event itself, in its own words (its lines name the
    # node, never a credential), and the libraries' own lines about the same events
    # would only repeat them, with URLs and tracebacks. At debug their lines show, but
    # not aiormq's one line per frame (bodies included): INFO and above.
    library_level = logging.INFO if numeric <= logging.DEBUG else logging.CRITICAL
    for name in ("aiormq", "aio_pika"):
        logging.getLogger(name).setLevel(library_level)
    # One access log line per Prometheus scrape or probe is noise.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def silence_broker_libraries() -> None:
    """For one-shot commands that report a broker failure in one line of their own:
    aio-pika and aiormq would also log it (through logging's last-resort handler, i.e.
    on stderr)."""
    for name in ("aiormq", "aio_pika"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def payload_logging_enabled() -> bool:
    """True only at debug level: the one level allowed to log payload text."""
    return _state["payloads"]


def format_exception(exc: BaseException, include_messages: bool | None = None) -> str:
    """A stack trace for the log.

    Exception messages may quote the job (`KeyError('<alert text>')`), so unless
    payload logging is on they are withheld: frames and exception types are what a
    maintainer needs to find the bug, and the job itself is in the dead-letter queue.
    """
    if include_messages is None:
        include_messages = payload_logging_enabled()
    if include_messages:
        return "".join(traceback.format_exception(exc))
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not seen for seen in chain):
        chain.append(current)
        current = current.__cause__ or current.__context__
    parts = [
        "Traceback (most recent call last):\n"
        + "".join(traceback.format_tb(item.__traceback__))
        + f"{type(item).__module__}.{type(item).__qualname__}: <message withheld>\n"
        for item in reversed(chain)
    ]
    return "\nDuring handling of the above exception, another exception occurred:\n\n".join(parts)


def get_logger(**context: Any) -> FilteringBoundLogger:
    """A structlog logger bound to `context` (resolved against the current config)."""
    return cast(FilteringBoundLogger, structlog.get_logger().bind(**context))
