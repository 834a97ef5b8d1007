"""Settings of `prompt-worker serve`: one typed object, built from flags, environment and
secret files.

Every setting has a flag and a `PROMPT_WORKER_*` variable; a flag given on the command
line wins over the variable, which wins over the default. A bad value is a
`SettingsError` naming where it came from (`--prefetch` or `PROMPT_WORKER_PREFETCH`), so
the command can exit 2 with one clear line instead of a traceback.

A secret setting (the broker URL, which holds the password) can also be read from a file
(`PROMPT_WORKER_AMQP_URL_FILE`, `--amqp-url-file`), as Kubernetes and Docker mount
secrets: an environment variable is readable in /proc/PID/environ, `docker inspect` and
crash reports. Error messages about a secret never quote its value.

`Settings` is a pydantic-settings model: each field's type checks its value, whatever
its source. `SETTINGS`, the table of flags and variables, lives in setting_flags.py,
light to import: `--help` is built from it alone. The two levels a value can come from,
the command line and the environment, are pydantic-settings sources (`CommandLine`,
`Environment`); `resolve` asks them in order and records the flag, variable or file
variable each value was read from, so that a later message about a value (credentials
the broker refuses) names what the operator actually set (`Settings.source_of`).
"""

import argparse
from collections.abc import Callable, Mapping
from typing import Annotated, Any

from pydantic import BeforeValidator, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from worker.render.replies import DEFAULT_MAX_MESSAGE_BYTES
from worker.transport.link import topology
from worker.transport.link.addresses import first_address, parse_addresses
from worker.transport.link.tls import TlsFiles, TlsFilesError, connect_kwargs
from worker.transport.setting_flags import (
    DEFAULT_AMQP_URL,
    DEFAULT_ARCHIVE_CONFIRM_TIMEOUT,
    DEFAULT_ARCHIVE_MAX_AGE,
    DEFAULT_ARCHIVE_MAX_BYTES,
    DEFAULT_ARCHIVE_STREAM,
    DEFAULT_HTTP_PORT,
    DEFAULT_MAX_INFLIGHT_BYTES,
    DEFAULT_OFFLOAD_BYTES,
    DEFAULT_PREFETCH,
    DEFAULT_RENDER_TIMEOUT,
    DEFAULT_SHUTDOWN_TIMEOUT,
    EVENT_LOOP_NAMES,
    LOG_FORMATS,
    LOG_LEVELS,
    NO_CONFIG_HELP,
    SETTINGS,
    SOURCES_ENV,
    EventLoopName,
    LogFormat,
    LogLevel,
    SettingSpec,
    add_arguments,
    without_settings,
)


class SettingsError(ValueError):
    """A setting has an unusable value; the message names the flag or variable."""


# Each validator takes the text of a flag or variable, or a typed value given in code;
# its ValueError is the message `resolve` reports after the setting's name.
def _int_in(low: int, high: int | None = None) -> Callable[[object], int]:
    def parse(value: object) -> int:
        if isinstance(value, str):
            try:
                value = int(value.strip().replace("_", ""))
            except ValueError:
                raise ValueError(f"expected an integer, got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected an integer, got {value!r}")
        if value < low or (high is not None and value > high):
            bound = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise ValueError(f"must be {bound}, got {value}")
        return value

    return parse


def _positive_float(value: object) -> float:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise ValueError(f"expected a number of seconds, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected a number of seconds, got {value!r}")
    if not value > 0:
        raise ValueError(f"must be positive, got {value}")
    return float(value)


def parse_amqp_url(text: str) -> str:
    """A broker URL, or several comma-separated (a cluster's nodes): transport/link/addresses.py."""
    return parse_addresses(text)


def _amqp_url(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError("expected amqp:// or amqps:// URLs as text")
    return parse_amqp_url(value)


def _name(value: object) -> str:
    if not isinstance(value, str) or not value or value != value.strip():
        raise ValueError(f"expected a non-empty name without surrounding spaces, got {value!r}")
    if value.startswith("amq."):
        raise ValueError(f"names starting with 'amq.' are reserved by RabbitMQ: {value!r}")
    if len(value.encode()) > 255:
        raise ValueError("AMQP names are limited to 255 bytes")
    return value


def _stream_name(value: object) -> str:
    """A stream's name, or empty for none."""
    if value == "":
        return ""
    return _name(value)


# RabbitMQ's x-max-age: a positive integer and a unit (years, months, days, hours,
# minutes, seconds).
_AGE_UNITS = ("Y", "M", "D", "h", "m", "s")


def _max_age(value: object) -> str:
    text = value.strip() if isinstance(value, str) else ""
    number, unit = text[:-1], text[-1:]
    if unit not in _AGE_UNITS or not number.isdigit() or int(number) < 1:
        raise ValueError(f"expected a number and one of Y, M, D, h, m, s (e.g. 7D), got {value!r}")
    return text


def _choice(choices: tuple[str, ...]) -> Callable[[object], str]:
    def parse(value: object) -> str:
        word = value.strip().lower() if isinstance(value, str) else None
        if word not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {value!r}")
        return word

    return parse


def _path(value: object) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"expected a path, got {value!r}")
    return value or None


def _checked(parse: Callable[[object], Any]) -> BeforeValidator:
    return BeforeValidator(parse)


class Settings(BaseSettings):
    """What `serve` runs with. Built from the command line and the environment by
    `resolve`; built directly (in code and tests) it reads neither."""

    # Defaults are trusted: they are not text a user wrote.
    model_config = SettingsConfigDict(frozen=True, extra="forbid", validate_default=False)

    amqp_url: Annotated[str, _checked(_amqp_url)] = DEFAULT_AMQP_URL
    request_queue: Annotated[str, _checked(_name)] = topology.DEFAULT_REQUEST_QUEUE
    reply_queue: Annotated[str, _checked(_name)] = topology.DEFAULT_REPLY_QUEUE
    # The dead-letter exchange and its queue share this name (CONTRACT.md §4).
    dead_letter_queue: Annotated[str, _checked(_name)] = topology.DEFAULT_DEAD_LETTER
    delivery_limit: Annotated[int, _checked(_int_in(1, 1_000))] = topology.DEFAULT_DELIVERY_LIMIT
    prefetch: Annotated[int, _checked(_int_in(1, 65_535))] = DEFAULT_PREFETCH
    max_message_bytes: Annotated[int, _checked(_int_in(1))] = DEFAULT_MAX_MESSAGE_BYTES
    # None: no configuration file, the empty configuration (an empty MCP registry).
    config_path: Annotated[str | None, _checked(_path)] = None
    # 0 disables the HTTP server. With --processes N, process i listens on port + i.
    http_port: Annotated[int, _checked(_int_in(0, 65_535))] = DEFAULT_HTTP_PORT
    http_host: Annotated[str, _checked(_name)] = "0.0.0.0"
    log_level: Annotated[LogLevel, _checked(_choice(LOG_LEVELS))] = "info"
    # None: JSON, or console when stderr is a terminal.
    log_format: Annotated[LogFormat | None, _checked(_choice(LOG_FORMATS))] = None
    processes: Annotated[int, _checked(_int_in(1, 256))] = 1
    offload_bytes: Annotated[int, _checked(_int_in(0))] = DEFAULT_OFFLOAD_BYTES
    shutdown_timeout: Annotated[float, _checked(_positive_float)] = DEFAULT_SHUTDOWN_TIMEOUT
    render_timeout: Annotated[float, _checked(_positive_float)] = DEFAULT_RENDER_TIMEOUT
    max_inflight_bytes: Annotated[int, _checked(_int_in(1))] = DEFAULT_MAX_INFLIGHT_BYTES
    # auto: uvloop when installed, else asyncio's own loop.
    event_loop: Annotated[EventLoopName, _checked(_choice(EVENT_LOOP_NAMES))] = "auto"
    archive_stream: Annotated[str, _checked(_stream_name)] = DEFAULT_ARCHIVE_STREAM
    archive_max_age: Annotated[str, _checked(_max_age)] = DEFAULT_ARCHIVE_MAX_AGE
    archive_max_bytes: Annotated[int, _checked(_int_in(1))] = DEFAULT_ARCHIVE_MAX_BYTES
    archive_confirm_timeout: Annotated[float, _checked(_positive_float)] = (
        DEFAULT_ARCHIVE_CONFIRM_TIMEOUT
    )
    tls_ca_file: Annotated[str | None, _checked(_path)] = None
    tls_cert_file: Annotated[str | None, _checked(_path)] = None
    tls_key_file: Annotated[str | None, _checked(_path)] = None
    # Secret settings read from a file: field -> path. Passed on as the path, so a
    # supervised worker process reads the file itself and the value stays out of its
    # environment.
    secret_files: tuple[tuple[str, str], ...] = ()
    # field -> the flag or variable its value was read from; a field not listed has
    # its default.
    sources: tuple[tuple[str, str], ...] = ()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Only the values given: `resolve` reads the command line and the environment
        # through sources of its own, which also record where each value came from.
        return (init_settings,)

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

    def source_of(self, field: str) -> str | None:
        """The flag, variable or file variable `field`'s value was read from
        (`--amqp-url`, `PROMPT_WORKER_AMQP_URL_FILE`, ...); None: its default."""
        return dict(self.sources).get(field)

    def to_env(self) -> dict[str, str]:
        """These settings as environment variables (how the supervisor passes them on):
        every value that was set or differs from its default, and where each came from."""
        env: dict[str, str] = {}
        files = dict(self.secret_files)
        sources = dict(self.sources)
        for spec in SETTINGS:
            value = getattr(self, spec.field)
            if spec.field in files:
                env[spec.file_env] = files[spec.field]
            elif value is not None and (spec.field in sources or value != spec.default):
                env[spec.env] = str(value)
        flags = [f"{field}={name}" for field, name in self.sources if name.startswith("--")]
        if flags:
            env[SOURCES_ENV] = ",".join(flags)
        return env


# The table --help is built from says what Settings does.
assert {spec.field for spec in SETTINGS} | {"secret_files", "sources"} == set(Settings.model_fields)
assert all(spec.default == Settings.model_fields[spec.field].default for spec in SETTINGS)

# Also the names of the light table (setting_flags.py), for the modules that import them
# from here.
__all__ = [
    "DEFAULT_AMQP_URL",
    "DEFAULT_HTTP_PORT",
    "DEFAULT_MAX_INFLIGHT_BYTES",
    "DEFAULT_OFFLOAD_BYTES",
    "DEFAULT_PREFETCH",
    "DEFAULT_RENDER_TIMEOUT",
    "DEFAULT_SHUTDOWN_TIMEOUT",
    "EVENT_LOOP_NAMES",
    "LOG_FORMATS",
    "LOG_LEVELS",
    "NO_CONFIG_HELP",
    "SETTINGS",
    "SOURCES_ENV",
    "CommandLine",
    "Environment",
    "EventLoopName",
    "LogFormat",
    "LogLevel",
    "SettingSpec",
    "Settings",
    "SettingsError",
    "add_arguments",
    "from_args",
    "from_env",
    "parse_amqp_url",
    "resolve",
    "without_settings",
]


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


_SPECS = {spec.field: spec for spec in SETTINGS}


class _Level(PydanticBaseSettingsSource):
    """One level a setting's text can come from: its value, or for a secret the file
    that holds it. `get_field_value` answers (text or None, the name it was read
    under, False); it raises ValueError, naming both, when a secret is given both ways,
    or when its file cannot be read."""

    def __init__(self, settings_cls: type[BaseSettings], given: Mapping[str, str | None]):
        super().__init__(settings_cls)
        self.given = given
        # field -> the file a secret was read from
        self.files: dict[str, str] = {}

    def names(self, spec: SettingSpec) -> tuple[str, str, str, str]:
        """(value key, its name, file key, its name) of `spec` at this level."""
        raise NotImplementedError

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        spec = _SPECS[field_name]
        key, name, file_key, file_name = self.names(spec)
        value = self.given.get(key)
        path = self.given.get(file_key) if spec.secret else None
        if value is not None and path is not None:
            raise ValueError(f"{name} and {file_name} are both set; set only one")
        if value is not None:
            return value, name, False
        if path is not None:
            try:
                text = _read_secret(path)
            except ValueError as exc:
                raise ValueError(f"{file_name}: {exc}") from None
            self.files[field_name] = path
            return text, file_name, False
        return None, name, False

    def __call__(self) -> dict[str, Any]:
        values = {}
        for name, field in self.settings_cls.model_fields.items():
            if name in _SPECS:
                value, _, _ = self.get_field_value(field, name)
                if value is not None:
                    values[name] = value
        return values


class CommandLine(_Level):
    """Flags: field -> text (and a secret's `<field>_file` -> path), None when not given."""

    def names(self, spec: SettingSpec) -> tuple[str, str, str, str]:
        return spec.field, spec.flag, spec.file_field, spec.file_flag


class Environment(_Level):
    """`PROMPT_WORKER_*` variables (and a secret's `_FILE` variable)."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]):
        super().__init__(settings_cls, environ)
        # Values a supervisor passed on as variables that the operator gave as flags.
        self.passed_on: dict[str, str] = {}
        for item in environ.get(SOURCES_ENV, "").split(","):
            field, _, name = item.partition("=")
            spec = _SPECS.get(field)
            if spec is not None and name in (spec.flag, spec.file_flag):
                self.passed_on[field] = name

    def names(self, spec: SettingSpec) -> tuple[str, str, str, str]:
        return spec.env, spec.env, spec.file_env, spec.file_env

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        value, name, complex_ = super().get_field_value(field, field_name)
        return value, self.passed_on.get(field_name, name), complex_


def _message(error: Mapping[str, Any]) -> str:
    """A validation error in our validators' words; never the value itself."""
    cause = error.get("ctx", {}).get("error")
    return str(cause) if isinstance(cause, ValueError) else str(error["msg"])


def resolve(flags: Mapping[str, str | None], environ: Mapping[str, str]) -> Settings:
    """Settings from flag values (field -> text or None) and the environment.

    All problems are collected, so a misconfigured deployment is fixed in one go.
    """
    levels = (CommandLine(Settings, flags), Environment(Settings, environ))
    values: dict[str, str] = {}
    sources: dict[str, str] = {}
    secret_files: list[tuple[str, str]] = []
    problems: list[str] = []
    for spec in SETTINGS:
        field = Settings.model_fields[spec.field]
        for level in levels:
            try:
                text, name, _ = level.get_field_value(field, spec.field)
            except ValueError as exc:
                problems.append(str(exc))
                break
            if text is not None:
                values[spec.field] = text
                sources[spec.field] = name
                if spec.field in level.files:
                    secret_files.append((spec.field, level.files[spec.field]))
                break
    try:
        settings = Settings.model_validate(
            {**values, "secret_files": tuple(secret_files), "sources": tuple(sources.items())}
        )
    except ValidationError as exc:
        for error in exc.errors():
            field_name = str(error["loc"][0]) if error["loc"] else ""
            problems.append(f"{sources.get(field_name, field_name)}: {_message(error)}")
    if problems:
        raise SettingsError("; ".join(problems))
    try:
        # Loads the CA, certificate and key once, so a bad file is a start-up error.
        connect_kwargs(first_address(settings.amqp_url), settings.tls)
    except TlsFilesError as exc:
        raise SettingsError(str(exc)) from None
    names = {settings.request_queue, settings.reply_queue, settings.dead_letter_queue}
    if settings.archive_stream in names:
        raise SettingsError(
            f"--archive-stream {settings.archive_stream!r} is one of the worker's queues; "
            "give the archive a name of its own"
        )
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
