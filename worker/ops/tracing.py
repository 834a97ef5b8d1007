"""Whether OpenTelemetry tracing is on, decided from the standard `OTEL_*` variables.

Tracing is off unless the environment asks for it, and while it is off nothing of
OpenTelemetry is imported: this module only reads variables. It is on when
`OTEL_TRACES_EXPORTER` names an exporter (`otlp`, `console`, several) or an OTLP
endpoint is set (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`),
and `OTEL_SDK_DISABLED` is not `true`. Everything else (exporters' settings, sampler,
resource, propagators, queue limits) is read by the SDK and its exporters from the
process's environment, the standard way: callers pass `os.environ`.

`start_tracing` then imports `worker.ops.otel` (the SDK, from the `otel` extra).
"""

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from worker.errors import ConfigError

if TYPE_CHECKING:
    from worker.ops.otel import JobTracing

_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def tracing_requested(environ: Mapping[str, str]) -> bool:
    """Whether the `OTEL_*` variables turn tracing on."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporters:
        return any(name.strip() not in ("", "none") for name in exporters.split(","))
    return any(environ.get(name, "").strip() for name in _ENDPOINTS)


def start_tracing(
    environ: Mapping[str, str],
    on_dropped: Callable[[int], None] | None = None,
    log_ignored: Callable[[str], None] = lambda _: None,
) -> "JobTracing | None":
    """The tracing the environment asks for, or None when it asks for none.

    `on_dropped(n)` is told of spans the SDK dropped (its export queue was full, or an
    export failed after the exporter's retries); `log_ignored(traceparent)` of a job's
    malformed traceparent (a new trace begins).
    Raises ConfigError when tracing is asked for but cannot be had.
    """
    if not tracing_requested(environ):
        return None
    try:
        from worker.ops.otel import JobTracing
    except ImportError as exc:
        raise ConfigError(
            "OTEL_* variables turn tracing on, but OpenTelemetry is not installed "
            f"({exc.name}): install the otel extra, pip install 'build-prompt-worker[otel]'"
        ) from None
    except ValueError as exc:  # opentelemetry.propagate loads OTEL_PROPAGATORS on import
        raise ConfigError(f"OTEL_PROPAGATORS: {exc}") from None
    return JobTracing.from_environment(environ, on_dropped=on_dropped, log_ignored=log_ignored)
