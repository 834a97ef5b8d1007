"""Settings of `prompt-worker serve`: one typed object, built from flags and environment.

Every setting has a flag and a `PROMPT_WORKER_*` variable; a flag given on the command
line wins over the variable, which wins over the default. A bad value is a
`SettingsError` naming where it came from (`--prefetch` or `PROMPT_WORKER_PREFETCH`), so
the command can exit 2 with one clear line instead of a traceback.
"""

import argparse
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from worker.render.renderer import DEFAULT_MAX_MESSAGE_BYTES
from worker.transport import topology

DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"
DEFAULT_PREFETCH = 64
DEFAULT_HTTP_PORT = 8080
# Jobs above this render in the helper process: inline, a render stalls the event loop
# (and every other job in flight) for as long as it takes, which grows with the job;
# in the helper only copying the bytes does. docs/PERFORMANCE.md ("Event loop and
# large jobs") has the measurements behind the threshold.
DEFAULT_OFFLOAD_BYTES = 256 * 1024
# Under Kubernetes' default 30 s termination grace period, so in-flight jobs finish
# before the kubelet's SIGKILL.
DEFAULT_SHUTDOWN_TIMEOUT = 25.0

LogLevel = Literal["debug", "info", "warning", "error"]
LogFormat = Literal["json", "console"]
LOG_LEVELS: tuple[LogLevel, ...] = ("debug", "info", "warning", "error")
LOG_FORMATS: tuple[LogFormat, ...] = ("json", "console")


class SettingsError(ValueError):
    """A setting has an unusable value; the message names the flag or variable."""


@dataclass(frozen=True, slots=True)
class Settings:
    amqp_url: str = DEFAULT_AMQP_URL
    request_queue: str = topology.DEFAULT_REQUEST_QUEUE
    reply_queue: str = topology.DEFAULT_REPLY_QUEUE
    # The dead-letter exchange and its queue share this name (CONTRACT.md §4).
    dead_letter_queue: str = topology.DEFAULT_DEAD_LETTER
    delivery_limit: int = topology.DEFAULT_DELIVERY_LIMIT
    prefetch: int = DEFAULT_PREFETCH
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    config_path: str | None = None
    # 0 disables the HTTP server. With --processes N, process i listens on port + i.
    http_port: int = DEFAULT_HTTP_PORT
    http_host: str = "0.0.0.0"
    log_level: LogLevel = "info"
    # None: JSON, or console when stderr is a terminal.
    log_format: LogFormat | None = None
    processes: int = 1
    offload_bytes: int = DEFAULT_OFFLOAD_BYTES
    shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT

    @property
    def topology(self) -> topology.Topology:
        return topology.Topology(
            request_queue=self.request_queue,
            reply_queue=self.reply_queue,
            dead_letter=self.dead_letter_queue,
            delivery_limit=self.delivery_limit,
        )

    def to_env(self) -> dict[str, str]:
        """These settings as environment variables (how the supervisor passes them on)."""
        env: dict[str, str] = {}
        for spec in SETTINGS:
            value = getattr(self, spec.field)
            if value is not None:
                env[spec.env] = str(value)
        return env


def _int_in(low: int, high: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text.strip().replace("_", ""))
        except ValueError:
            raise ValueError(f"expected an integer, got {text!r}") from None
        if value < low or (high is not None and value > high):
            bound = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise ValueError(f"must be {bound}, got {value}")
        return value

    return parse


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0:
        raise ValueError(f"must be positive, got {text}")
    return value


def _amqp_url(text: str) -> str:
    parts = urlsplit(text)
    if parts.scheme not in ("amqp", "amqps") or not parts.hostname:
        raise ValueError(
            f"expected amqp://user:password@host:port/vhost or amqps://..., got {text!r}"
        )
    return text


def _name(text: str) -> str:
    if not text or text != text.strip():
        raise ValueError(f"expected a non-empty name without surrounding spaces, got {text!r}")
    if text.startswith("amq."):
        raise ValueError(f"names starting with 'amq.' are reserved by RabbitMQ: {text!r}")
    if len(text.encode()) > 255:
        raise ValueError("AMQP names are limited to 255 bytes")
    return text


def _choice(choices: tuple[str, ...]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {text!r}")
        return value

    return parse


def _path(text: str) -> str | None:
    return text or None


@dataclass(frozen=True, slots=True)
class SettingSpec:
    field: str
    flag: str
    env: str
    parse: Callable[[str], Any]
    help: str
    metavar: str = ""


SETTINGS: tuple[SettingSpec, ...] = (
    SettingSpec(
        "amqp_url",
        "--amqp-url",
        "PROMPT_WORKER_AMQP_URL",
        _amqp_url,
        "broker URL, amqp:// or amqps://",
        "URL",
    ),
    SettingSpec(
        "request_queue",
        "--request-queue",
        "PROMPT_WORKER_REQUEST_QUEUE",
        _name,
        "queue the jobs are consumed from",
        "NAME",
    ),
    SettingSpec(
        "reply_queue",
        "--reply-queue",
        "PROMPT_WORKER_REPLY_QUEUE",
        _name,
        "queue for replies to jobs without reply_to",
        "NAME",
    ),
    SettingSpec(
        "dead_letter_queue",
        "--dead-letter-queue",
        "PROMPT_WORKER_DEAD_LETTER_QUEUE",
        _name,
        "dead-letter exchange and queue (same name)",
        "NAME",
    ),
    SettingSpec(
        "delivery_limit",
        "--delivery-limit",
        "PROMPT_WORKER_DELIVERY_LIMIT",
        _int_in(1, 1_000),
        "deliveries of a job before the broker dead-letters it",
        "N",
    ),
    SettingSpec(
        "prefetch",
        "--prefetch",
        "PROMPT_WORKER_PREFETCH",
        _int_in(1, 65_535),
        "jobs in flight per worker process (per-consumer QoS)",
        "N",
    ),
    SettingSpec(
        "max_message_bytes",
        "--max-message-bytes",
        "PROMPT_WORKER_MAX_MESSAGE_BYTES",
        _int_in(1),
        "larger jobs get a payload_too_large reply",
        "BYTES",
    ),
    SettingSpec(
        "config_path",
        "--config",
        "PROMPT_WORKER_CONFIG",
        _path,
        "worker.yaml (MCP registry, masking, prompts)",
        "PATH",
    ),
    SettingSpec(
        "http_port",
        "--http-port",
        "PROMPT_WORKER_HTTP_PORT",
        _int_in(0, 65_535),
        "port of /healthz, /readyz and /metrics; 0 disables",
        "PORT",
    ),
    SettingSpec(
        "http_host",
        "--http-host",
        "PROMPT_WORKER_HTTP_HOST",
        _name,
        "address the HTTP server binds",
        "ADDRESS",
    ),
    SettingSpec(
        "log_level",
        "--log-level",
        "PROMPT_WORKER_LOG_LEVEL",
        _choice(LOG_LEVELS),
        "debug also logs request bodies (they may hold secrets)",
        "LEVEL",
    ),
    SettingSpec(
        "log_format",
        "--log-format",
        "PROMPT_WORKER_LOG_FORMAT",
        _choice(LOG_FORMATS),
        "json or console; default json, console on a terminal",
        "FORMAT",
    ),
    SettingSpec(
        "processes",
        "--processes",
        "PROMPT_WORKER_PROCESSES",
        _int_in(1, 256),
        "worker processes sharing the queue, supervised",
        "N",
    ),
    SettingSpec(
        "offload_bytes",
        "--offload-bytes",
        "PROMPT_WORKER_OFFLOAD_BYTES",
        _int_in(0),
        "jobs larger than this render in a helper process",
        "BYTES",
    ),
    SettingSpec(
        "shutdown_timeout",
        "--shutdown-timeout",
        "PROMPT_WORKER_SHUTDOWN_TIMEOUT",
        _positive_float,
        "seconds to finish in-flight jobs after SIGTERM",
        "SECONDS",
    ),
)

assert {s.field for s in SETTINGS} == {f.name for f in dataclasses.fields(Settings)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one flag per setting; unset flags stay None so the environment can fill them."""
    defaults = Settings()
    for spec in SETTINGS:
        default = getattr(defaults, spec.field)
        shown = "auto" if default is None else default
        parser.add_argument(
            spec.flag,
            dest=spec.field,
            metavar=spec.metavar or None,
            default=None,
            help=f"{spec.help} (${spec.env}; default {shown})",
        )


def resolve(flags: Mapping[str, str | None], environ: Mapping[str, str]) -> Settings:
    """Settings from flag values (field -> text or None) and the environment.

    All problems are collected, so a misconfigured deployment is fixed in one go.
    """
    values: dict[str, Any] = {}
    problems: list[str] = []
    for spec in SETTINGS:
        flag_value = flags.get(spec.field)
        if flag_value is not None:
            source, text = spec.flag, flag_value
        elif spec.env in environ:
            source, text = spec.env, environ[spec.env]
        else:
            continue
        try:
            values[spec.field] = spec.parse(text)
        except ValueError as exc:
            problems.append(f"{source}: {exc}")
    if problems:
        raise SettingsError("; ".join(problems))
    settings = Settings(**values)
    names = {settings.request_queue, settings.reply_queue, settings.dead_letter_queue}
    if len(names) != 3:
        raise SettingsError(
            "request, reply and dead-letter queues must have three different names, got "
            f"{settings.request_queue!r}, {settings.reply_queue!r}, {settings.dead_letter_queue!r}"
        )
    return settings


def from_args(args: argparse.Namespace, environ: Mapping[str, str]) -> Settings:
    return resolve({spec.field: getattr(args, spec.field, None) for spec in SETTINGS}, environ)


def from_env(environ: Mapping[str, str]) -> Settings:
    return resolve({}, environ)
