"""The flags and variables of `prompt-worker serve`'s settings: a table, light to import.

`--help` is built from it without loading the typed settings (worker/transport/settings.py,
pydantic-settings), which only a command that runs needs. Each row names a setting's
field, flag, variable and default; a secret also has a file form (`--amqp-url-file`,
`PROMPT_WORKER_AMQP_URL_FILE`).
"""

import argparse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

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
# The archive stream (SPEC §12, docs/ARCHIVE.md): its name (empty: no archive), how long
# its records are kept, the most bytes it may hold, and how long a job's acknowledgement
# waits for its record's confirm.
DEFAULT_ARCHIVE_STREAM = "build-prompt.archive"
DEFAULT_ARCHIVE_MAX_AGE = "7D"
# A cap that keeps the archive from filling the broker's disk, whose alarm would block
# every reply. 10 GB is 1.3 million typical records, a week at 2 jobs a second: a fleet
# sizes it from its rate and disk (docs/ARCHIVE.md, "Retention and sizes").
DEFAULT_ARCHIVE_MAX_BYTES = 10_000_000_000
DEFAULT_ARCHIVE_CONFIRM_TIMEOUT = 2.0

LogLevel = Literal["debug", "info", "warning", "error"]
LogFormat = Literal["json", "console"]
LOG_LEVELS: tuple[LogLevel, ...] = ("debug", "info", "warning", "error")
LOG_FORMATS: tuple[LogFormat, ...] = ("json", "console")
# What `serve` runs on (worker/transport/event_loop.py).
EventLoopName = Literal["auto", "uvloop", "asyncio"]
EVENT_LOOP_NAMES: tuple[EventLoopName, ...] = ("auto", "uvloop", "asyncio")


# What serve runs with when no configuration file is given: docs/OPERATIONS.md says the
# same (a test checks), and scripts/serve gives the README's example file.
NO_CONFIG_HELP = "none: no MCP server registry, masking on"

# Where each value came from, for the processes the supervisor starts: their values
# arrive as variables, this says which of them the operator gave as flags
# ("prefetch=--prefetch,amqp_url=--amqp-url-file").
SOURCES_ENV = "PROMPT_WORKER_SETTING_SOURCES"


@dataclass(frozen=True, slots=True)
class SettingSpec:
    field: str
    flag: str
    env: str
    help: str
    metavar: str = ""
    # Also read from a file (flag + "-file", variable + "_FILE"); never quoted in errors.
    secret: bool = False
    # The value when neither flag nor variable is given (Settings' default, a check in
    # settings.py ensures), and what --help says of it when the value alone would not.
    default: object = None
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
        "broker URL, amqp:// or amqps://; a cluster's nodes as several URLs, comma-separated",
        "URL",
        secret=True,
        default=DEFAULT_AMQP_URL,
    ),
    SettingSpec(
        "request_queue",
        "--request-queue",
        "PROMPT_WORKER_REQUEST_QUEUE",
        "queue the jobs are consumed from",
        "NAME",
        default="build-prompt",
    ),
    SettingSpec(
        "reply_queue",
        "--reply-queue",
        "PROMPT_WORKER_REPLY_QUEUE",
        "queue for replies to jobs without reply_to",
        "NAME",
        default="build-prompt.replies",
    ),
    SettingSpec(
        "dead_letter_queue",
        "--dead-letter-queue",
        "PROMPT_WORKER_DEAD_LETTER_QUEUE",
        "dead-letter exchange and queue (same name)",
        "NAME",
        default="build-prompt.dead",
    ),
    SettingSpec(
        "delivery_limit",
        "--delivery-limit",
        "PROMPT_WORKER_DELIVERY_LIMIT",
        "deliveries of a job before the broker dead-letters it",
        "N",
        default=5,
    ),
    SettingSpec(
        "prefetch",
        "--prefetch",
        "PROMPT_WORKER_PREFETCH",
        "jobs in flight per worker process (per-consumer QoS)",
        "N",
        default=DEFAULT_PREFETCH,
    ),
    SettingSpec(
        "max_message_bytes",
        "--max-message-bytes",
        "PROMPT_WORKER_MAX_MESSAGE_BYTES",
        "larger jobs get a payload_too_large reply",
        "BYTES",
        default=32 * 1024 * 1024,
    ),
    SettingSpec(
        "config_path",
        "--config",
        "PROMPT_WORKER_CONFIG",
        "worker.yaml (MCP registry, masking, prompts)",
        "PATH",
        default_help=NO_CONFIG_HELP,
        default=None,
    ),
    SettingSpec(
        "http_port",
        "--http-port",
        "PROMPT_WORKER_HTTP_PORT",
        "port of /healthz, /readyz and /metrics; 0 disables",
        "PORT",
        default=DEFAULT_HTTP_PORT,
    ),
    SettingSpec(
        "http_host",
        "--http-host",
        "PROMPT_WORKER_HTTP_HOST",
        "address the HTTP server binds",
        "ADDRESS",
        default="0.0.0.0",
    ),
    SettingSpec(
        "log_level",
        "--log-level",
        "PROMPT_WORKER_LOG_LEVEL",
        "debug also logs request bodies (they may hold secrets)",
        "LEVEL",
        default="info",
    ),
    SettingSpec(
        "log_format",
        "--log-format",
        "PROMPT_WORKER_LOG_FORMAT",
        "json or console",
        "FORMAT",
        default_help="json, console on a terminal",
        default=None,
    ),
    SettingSpec(
        "processes",
        "--processes",
        "PROMPT_WORKER_PROCESSES",
        "worker processes sharing the queue, supervised",
        "N",
        default=1,
    ),
    SettingSpec(
        "offload_bytes",
        "--offload-bytes",
        "PROMPT_WORKER_OFFLOAD_BYTES",
        "jobs larger than this render in a helper process",
        "BYTES",
        default=DEFAULT_OFFLOAD_BYTES,
    ),
    SettingSpec(
        "shutdown_timeout",
        "--shutdown-timeout",
        "PROMPT_WORKER_SHUTDOWN_TIMEOUT",
        "seconds to finish in-flight jobs after SIGTERM",
        "SECONDS",
        default=DEFAULT_SHUTDOWN_TIMEOUT,
    ),
    SettingSpec(
        "tls_ca_file",
        "--tls-ca-file",
        "PROMPT_WORKER_TLS_CA_FILE",
        "CA certificates (PEM) the broker's certificate must chain to (amqps://)",
        "PATH",
        default_help="the system's CAs",
        default=None,
    ),
    SettingSpec(
        "tls_cert_file",
        "--tls-cert-file",
        "PROMPT_WORKER_TLS_CERT_FILE",
        "client certificate (PEM) for mutual TLS",
        "PATH",
        default_help="none",
        default=None,
    ),
    SettingSpec(
        "tls_key_file",
        "--tls-key-file",
        "PROMPT_WORKER_TLS_KEY_FILE",
        "private key (PEM, unencrypted) of the client certificate",
        "PATH",
        default_help="none",
        default=None,
    ),
    SettingSpec(
        "render_timeout",
        "--render-timeout",
        "PROMPT_WORKER_RENDER_TIMEOUT",
        "seconds a render may take before it is abandoned and the job retried",
        "SECONDS",
        default=DEFAULT_RENDER_TIMEOUT,
    ),
    SettingSpec(
        "max_inflight_bytes",
        "--max-inflight-bytes",
        "PROMPT_WORKER_MAX_INFLIGHT_BYTES",
        "job bytes handled at once; beyond it consuming pauses (a bigger job runs alone)",
        "BYTES",
        default=DEFAULT_MAX_INFLIGHT_BYTES,
    ),
    SettingSpec(
        "event_loop",
        "--event-loop",
        "PROMPT_WORKER_EVENT_LOOP",
        "auto (uvloop when installed), uvloop or asyncio",
        "LOOP",
        default="auto",
    ),
    SettingSpec(
        "archive_stream",
        "--archive-stream",
        "PROMPT_WORKER_ARCHIVE_STREAM",
        "stream every answered job is recorded on; empty: no archive",
        "NAME",
        default=DEFAULT_ARCHIVE_STREAM,
    ),
    SettingSpec(
        "archive_max_age",
        "--archive-max-age",
        "PROMPT_WORKER_ARCHIVE_MAX_AGE",
        "how long the stream keeps records (x-max-age: a number and Y, M, D, h, m or s)",
        "AGE",
        default=DEFAULT_ARCHIVE_MAX_AGE,
    ),
    SettingSpec(
        "archive_max_bytes",
        "--archive-max-bytes",
        "PROMPT_WORKER_ARCHIVE_MAX_BYTES",
        "the most bytes the stream holds (x-max-length-bytes); older records go first",
        "BYTES",
        default=DEFAULT_ARCHIVE_MAX_BYTES,
    ),
    SettingSpec(
        "archive_confirm_timeout",
        "--archive-confirm-timeout",
        "PROMPT_WORKER_ARCHIVE_CONFIRM_TIMEOUT",
        "seconds a job's ack waits for its record's confirm; past it the record counts as lost",
        "SECONDS",
        default=DEFAULT_ARCHIVE_CONFIRM_TIMEOUT,
    ),
)


def without_settings(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` less every setting's variables (and their `_FILE` forms)."""
    names = {spec.env for spec in SETTINGS} | {spec.file_env for spec in SETTINGS if spec.secret}
    names.add(SOURCES_ENV)
    return {key: value for key, value in environ.items() if key not in names}


def add_arguments(
    parser: "argparse._ActionsContainer", fields: Iterable[str] | None = None
) -> None:
    """Add one flag per setting (of `fields`, default all); unset flags stay None so the
    environment can fill them."""
    wanted = None if fields is None else set(fields)
    for spec in SETTINGS:
        if wanted is not None and spec.field not in wanted:
            continue
        assert spec.default_help or spec.default is not None, f"{spec.field}: say what None is"
        shown = spec.default_help or spec.default
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
