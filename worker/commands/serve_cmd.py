"""The RabbitMQ worker.

Consumes build-prompt jobs, publishes each reply (to `reply_to`, else the reply queue)
and acknowledges the job once the broker confirmed the reply. Bad input gets an error
reply and is dead-lettered. Starts before the broker if need be and reconnects on its
own. SIGTERM/SIGINT: stop taking jobs, finish those in flight, exit 0; a second signal
exits at once. Every flag has a PROMPT_WORKER_* variable; flags win.
Exit codes: 0 clean stop, 2 bad settings, configuration, broker topology conflict, a
broker TLS certificate that fails verification or credentials the broker refuses
(ACCESS_REFUSED is not retried).
"""

import argparse
import os
import sys
from typing import TYPE_CHECKING

from worker.errors import ConfigError

if TYPE_CHECKING:
    from worker.render.config import WorkerConfig
    from worker.render.renderer import Renderer
    from worker.transport.settings import Settings

USAGE_ERROR = 2
HELP = "consume jobs from RabbitMQ and publish replies"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # The flags' table only: --help needs no typed settings (pydantic-settings).
    from worker.transport import setting_flags

    setting_flags.add_arguments(parser)


def run(args: argparse.Namespace, renderer_class: "type[Renderer] | None" = None) -> int:
    """Serve with `args`; `renderer_class` (a `Renderer` subclass) is for tests only."""
    from worker.ops.logs import configure_logging
    from worker.render.config import load_config
    from worker.transport.event_loop import EventLoopUnavailable, loop_factory, run_on
    from worker.transport.processes.supervisor import Supervisor
    from worker.transport.settings import SettingsError, from_args

    try:
        settings = from_args(args, os.environ)
    except SettingsError as exc:
        print(f"prompt-worker serve: {exc}", file=sys.stderr)
        return USAGE_ERROR
    configure_logging(settings.log_level, settings.log_format)
    try:
        config = load_config(settings.config_path)
    except ConfigError as exc:
        print(f"prompt-worker serve: configuration error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    try:
        factory = loop_factory(settings.event_loop)
    except EventLoopUnavailable as exc:
        print(f"prompt-worker serve: {exc}", file=sys.stderr)
        return USAGE_ERROR
    if settings.processes > 1:
        return Supervisor(settings).run()
    return run_on(factory, serve(settings, config, renderer_class))


async def serve(
    settings: "Settings", config: "WorkerConfig", renderer_class: "type[Renderer] | None" = None
) -> int:
    """Run one worker process until signalled; its exit code."""
    import asyncio
    import signal

    from worker import __version__
    from worker.collector import settle_after_start_up
    from worker.ops.http import HealthServer
    from worker.ops.logs import get_logger
    from worker.ops.metrics import Metrics
    from worker.ops.tracing import start_tracing
    from worker.render.renderer import Renderer
    from worker.transport.consumer.worker import Worker
    from worker.transport.event_loop import running_loop_name

    log = get_logger(component="serve")
    metrics = Metrics(__version__)
    try:
        tracing = start_tracing(
            os.environ,
            on_dropped=metrics.trace_spans_dropped.inc,
            log_ignored=lambda value: log.debug("traceparent_ignored", traceparent=value),
        )
    except ConfigError as exc:
        log.error("tracing_unavailable", error=str(exc))
        return USAGE_ERROR
    renderer = (renderer_class or Renderer)(config, max_message_bytes=settings.max_message_bytes)
    worker = Worker(settings, renderer, metrics, tracing=tracing)

    signals = 0

    def on_signal(sig: signal.Signals) -> None:
        nonlocal signals
        signals += 1
        if signals == 1:
            worker.request_stop()
            log.info("signal_received", signal=sig.name, action="finishing in-flight jobs")
        else:
            # Unacknowledged jobs go back to the queue when the connection drops.
            log.warning("signal_received", signal=sig.name, action="exiting now")
            os._exit(128 + sig)

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)

    http: HealthServer | None = None
    if settings.http_port:
        http = HealthServer(
            settings.http_host, settings.http_port, metrics, worker.readiness, worker.notes
        )
        try:
            await http.start()
        except OSError as exc:
            log.error(
                "http_bind_failed", host=settings.http_host, port=settings.http_port, error=str(exc)
            )
            return USAGE_ERROR
    frozen = settle_after_start_up()
    log.info(
        "starting",
        version=__version__,
        http_port=settings.http_port or None,
        request_queue=settings.request_queue,
        archive_stream=settings.archive_stream or None,
        event_loop=running_loop_name(),
        tracing=tracing is not None,
        # Which scan runs masking: "libhs" is fastest, "python" means slow jobs.
        masking_engine=renderer.masker.prefilter.engine if renderer.masker else None,
        frozen_objects=frozen,
    )
    try:
        return await worker.run()
    finally:
        if http is not None:
            await http.stop()
        if tracing is not None:
            # Exports what is queued: the exporter's timeout a batch, 30 s at most (the SDK's).
            tracing.shutdown()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
