"""Settings of `prompt-worker serve`: one typed object, built from flags and environment.

Every setting has a flag and a `PROMPT_WORKER_*` variable; a flag given on the command
line wins over the variable, which wins over the default. A bad value is a
`SettingsError` naming where it came from (`--prefetch` or `PROMPT_WORKER_PREFETCH`), so
the command can exit 2 with one clear line instead of a traceback.

A secret setting (the broker URL, which holds the password) can also be read from a file
(`PROMPT_WORKER_AMQP_URL_FILE`, `--amqp-url-file`), as Kubernetes and Docker mount
secrets: an environment variable is readable in /proc/PID/environ, `docker inspect` and
crash reports. Error messages about a secret never quote its value.
"""

import argparse
import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from worker.render.replies import DEFAULT_MAX_MESSAGE_BYTES
from worker.transport import topology
from worker.transport.addresses import first_address, parse_addresses
from worker.transport.tls import TlsFiles, TlsFilesError, connect_kwargs

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
# The longest a render may take before it is abandoned (the helper process killed) and
# the job retried, then answered `render_timeout`: a typical job renders in well under
# a millisecond and one at the size limit in well under this (docs/PERFORMANCE.md,
# "Event loop and large jobs").
DEFAULT_RENDER_TIMEOUT = 5.0
# Bytes of job bodies handled at once: prefetch x the message limit would otherwise be
# what one worker may hold, far beyond its memory limit (docs/OPERATIONS.md, "Memory").
DEFAULT_MAX_INFLIGHT_BYTES = 64 * 1024 * 1024

LogLevel = Literal["debug", "info", "warning", "error"]
LogFormat = Literal["json", "console"]
LOG_LEVELS: tuple[LogLevel, ...] = ("debug", "info", "warning", "error")
LOG_FORMATS: tuple[LogFormat, ...] = ("json", "console")
# What `serve` runs on (worker/transport/event_loop.py).
EventLoopName = Literal["auto", "uvloop", "asyncio"]
EVENT_LOOP_NAMES: tuple[EventLoopName, ...] = ("auto", "uvloop", "asyncio")
# How `serve` encodes and decodes AMQP frames (worker/transport/frames.py).
AmqpCodecName = Literal["fast", "pamqp"]
AMQP_CODEC_NAMES: tuple[AmqpCodecName, ...] = ("fast", "pamqp")


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
    render_timeout: float = DEFAULT_RENDER_TIMEOUT
    max_inflight_bytes: int = DEFAULT_MAX_INFLIGHT_BYTES
    # auto: uvloop when installed, else asyncio's own loop.
    event_loop: EventLoopName = "auto"
    # fast: the per-job frames encoded and decoded directly, the rest by pamqp.
    amqp_codec: AmqpCodecName = "fast"
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    # Secret settings read from a file: field -> path. Passed on as the path, so a
    # supervised worker process reads the file itself and the value stays out of its
    # environment.
    secret_files: tuple[tuple[str, str], ...] = ()

    @property
    def tls(self) -> TlsFiles:
        return TlsFiles(self.tls_ca_file, self.tls_cert_file, self.tls_key_file)

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
        files = dict(self.secret_files)
        for spec in SETTINGS:
            value = getattr(self, spec.field)
            if spec.field in files:
                env[spec.file_env] = files[spec.field]
            elif value is not None:
                env[spec.env] = str(value)
        return env


def without_settings(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` less every setting's variables (and their `_FILE` forms)."""
    names = {spec.env for spec in SETTINGS} | {spec.file_env for spec in SETTINGS if spec.secret}
    return {key: value for key, value in environ.items() if key not in names}


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


def parse_amqp_url(text: str) -> str:
    """A broker URL, or several comma-separated (a cluster's nodes): transport/addresses.py."""
    return parse_addresses(text)


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
    # Also read from a file (flag + "-file", variable + "_FILE"); never quoted in errors.
    secret: bool = False
    # What --help says the default is, when the value alone would not say it.
    default_help: str = ""

    @property
    def file_flag(self) -> str:
        return f"{self.flag}-file"

    @property
    def file_env(self) -> str:
        return f"{self.env}_FILE"

    @property
    def file_field(self) -> str:
        return f"{self.field}_file"


SETTINGS: tuple[SettingSpec, ...] = (
    SettingSpec(
        "amqp_url",
        "--amqp-url",
        "PROMPT_WORKER_AMQP_URL",
        parse_amqp_url,
        "broker URL, amqp:// or amqps://; a cluster's nodes as several URLs, comma-separated",
        "URL",
        secret=True,
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
    SettingSpec(
        "tls_ca_file",
        "--tls-ca-file",
        "PROMPT_WORKER_TLS_CA_FILE",
        _path,
        "CA certificates (PEM) the broker's certificate must chain to (amqps://)",
        "PATH",
        default_help="the system's CAs",
    ),
    SettingSpec(
        "tls_cert_file",
        "--tls-cert-file",
        "PROMPT_WORKER_TLS_CERT_FILE",
        _path,
        "client certificate (PEM) for mutual TLS",
        "PATH",
        default_help="none",
    ),
    SettingSpec(
        "tls_key_file",
        "--tls-key-file",
        "PROMPT_WORKER_TLS_KEY_FILE",
        _path,
        "private key (PEM, unencrypted) of the client certificate",
        "PATH",
        default_help="none",
    ),
    SettingSpec(
        "render_timeout",
        "--render-timeout",
        "PROMPT_WORKER_RENDER_TIMEOUT",
        _positive_float,
        "seconds a render may take before it is abandoned and the job retried",
        "SECONDS",
    ),
    SettingSpec(
        "max_inflight_bytes",
        "--max-inflight-bytes",
        "PROMPT_WORKER_MAX_INFLIGHT_BYTES",
        _int_in(1),
        "job bytes handled at once; beyond it consuming pauses (a bigger job runs alone)",
        "BYTES",
    ),
    SettingSpec(
        "event_loop",
        "--event-loop",
        "PROMPT_WORKER_EVENT_LOOP",
        _choice(EVENT_LOOP_NAMES),
        "auto (uvloop when installed), uvloop or asyncio",
        "LOOP",
    ),
    SettingSpec(
        "amqp_codec",
        "--amqp-codec",
        "PROMPT_WORKER_AMQP_CODEC",
        _choice(AMQP_CODEC_NAMES),
        "fast (the frames of every job encoded directly) or pamqp (aiormq's own codec)",
        "CODEC",
    ),
)

assert {s.field for s in SETTINGS} | {"secret_files"} == {
    f.name for f in dataclasses.fields(Settings)
}


def add_arguments(
    parser: "argparse._ActionsContainer", fields: Iterable[str] | None = None
) -> None:
    """Add one flag per setting (of `fields`, default all); unset flags stay None so the
    environment can fill them."""
    defaults = Settings()
    wanted = None if fields is None else set(fields)
    for spec in SETTINGS:
        if wanted is not None and spec.field not in wanted:
            continue
        default = getattr(defaults, spec.field)
        shown = spec.default_help or ("auto" if default is None else default)
        parser.add_argument(
            spec.flag,
            dest=spec.field,
            metavar=spec.metavar or None,
            default=None,
            help=f"{spec.help} (${spec.env}; default {shown})",
        )
        if spec.secret:
            parser.add_argument(
                spec.file_flag,
                dest=spec.file_field,
                metavar="PATH",
                default=None,
                help=f"read {spec.flag}'s value from this file, e.g. a mounted secret "
                f"(${spec.file_env})",
            )


def _read_secret(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not UTF-8 text") from None
    # Secret files are usually written with a final newline, which is not the value.
    return text.removesuffix("\n").removesuffix("\r")


def _lookup(
    spec: SettingSpec, flags: Mapping[str, str | None], environ: Mapping[str, str]
) -> tuple[str, str, str | None] | None:
    """(where it came from, its text, the file it was read from), or None when unset.

    The command line wins over the environment; at either level, a secret given both
    directly and as a file is an error rather than a guess.
    """
    levels = (
        (spec.flag, flags.get(spec.field), spec.file_flag, flags.get(spec.file_field)),
        (spec.env, environ.get(spec.env), spec.file_env, environ.get(spec.file_env)),
    )
    for name, value, file_name, path in levels:
        if not spec.secret:
            path = None
        if value is not None and path is not None:
            raise ValueError(f"{name} and {file_name} are both set; set only one")
        if value is not None:
            return name, value, None
        if path is not None:
            try:
                return file_name, _read_secret(path), path
            except ValueError as exc:
                raise ValueError(f"{file_name}: {exc}") from None
    return None


def resolve(flags: Mapping[str, str | None], environ: Mapping[str, str]) -> Settings:
    """Settings from flag values (field -> text or None) and the environment.

    All problems are collected, so a misconfigured deployment is fixed in one go.
    """
    values: dict[str, Any] = {}
    secret_files: list[tuple[str, str]] = []
    problems: list[str] = []
    for spec in SETTINGS:
        try:
            found = _lookup(spec, flags, environ)
        except ValueError as exc:
            problems.append(str(exc))
            continue
        if found is None:
            continue
        source, text, path = found
        try:
            values[spec.field] = spec.parse(text)
        except ValueError as exc:
            problems.append(f"{source}: {exc}")
        if path is not None:
            secret_files.append((spec.field, path))
    if problems:
        raise SettingsError("; ".join(problems))
    settings = Settings(**values, secret_files=tuple(secret_files))
    try:
        # Loads the CA, certificate and key once, so a bad file is a start-up error.
        connect_kwargs(first_address(settings.amqp_url), settings.tls)
    except TlsFilesError as exc:
        raise SettingsError(str(exc)) from None
    names = {settings.request_queue, settings.reply_queue, settings.dead_letter_queue}
    if len(names) != 3:
        raise SettingsError(
            "request, reply and dead-letter queues must have three different names, got "
            f"{settings.request_queue!r}, {settings.reply_queue!r}, {settings.dead_letter_queue!r}"
        )
    return settings


def from_args(args: argparse.Namespace, environ: Mapping[str, str]) -> Settings:
    """Settings from the flags `add_arguments` added to `args` and the environment."""
    flags = {spec.field: getattr(args, spec.field, None) for spec in SETTINGS}
    flags.update(
        {spec.file_field: getattr(args, spec.file_field, None) for spec in SETTINGS if spec.secret}
    )
    return resolve(flags, environ)


def from_env(environ: Mapping[str, str]) -> Settings:
    return resolve({}, environ)
