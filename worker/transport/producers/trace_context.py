"""The trace context a producer puts on a job: W3C `traceparent` and `tracestate`.

`PromptClient` is a library in its host's process: it continues the host's current
OpenTelemetry context when the host uses OpenTelemetry (it has imported its API), and
otherwise imports nothing of it, as a library must not bring a tracing stack its host
does not run. The commands that publish jobs themselves (`rerender --broker`,
`replay-dead`) make spans of their own when `OTEL_*` turns tracing on for them
(`worker.ops.tracing`).
"""

import sys


def caller_context_headers() -> dict[str, str]:
    """The headers of the calling task's current trace context; none when the process
    does not use OpenTelemetry or has no current span."""
    if "opentelemetry.trace" not in sys.modules:
        return {}
    from opentelemetry import propagate

    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier
