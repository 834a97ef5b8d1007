"""The worker's small HTTP server: liveness, readiness and Prometheus metrics.

* `/healthz` answers 200 while the event loop runs (a stalled loop cannot answer).
* `/readyz` answers 200 while the worker is connected and consuming, 503 otherwise
  (starting, broker unreachable, reconnecting, draining for shutdown); it also carries
  notes that never make the worker unready (the archive's state, docs/ARCHIVE.md).
* `/metrics` is the Prometheus exposition of the worker's own registry.

Nothing else is served: any other path is 404, another method on these three is 405,
and the `Server` header names the worker without versions. It binds to one address
(`--http-host`), so a deployment can keep it off public interfaces.
"""

from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.openmetrics import exposition as openmetrics

from worker.ops.metrics import Metrics

# aiohttp would announce itself with Python's and its own version.
SERVER_HEADER = "prompt-worker"


class HealthServer:
    def __init__(
        self,
        host: str,
        port: int,
        metrics: Metrics,
        readiness: Callable[[], dict[str, bool]],
        notes: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        """`readiness()` returns named conditions; ready means all of them hold.
        `notes()` adds facts to /readyz that do not count towards it."""
        self.host = host
        self.port = port
        self.metrics = metrics
        self.readiness = readiness
        self.notes = notes
        self._runner: web.AppRunner | None = None

    def app(self) -> web.Application:
        app = web.Application()
        app.on_response_prepare.append(_hide_versions)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        return app

    async def start(self) -> None:
        """Bind and serve; raises OSError when the port is taken."""
        runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        await runner.setup()
        try:
            await web.TCPSite(runner, self.host, self.port).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "alive"}, dumps=_dumps)

    async def _readyz(self, _: web.Request) -> web.Response:
        conditions = self.readiness()
        ready = all(conditions.values())
        notes = self.notes() if self.notes is not None else {}
        return web.json_response(
            {"ready": ready, **conditions, **notes}, status=200 if ready else 503, dumps=_dumps
        )

    async def _metrics(self, request: web.Request) -> web.Response:
        if "application/openmetrics-text" in request.headers.get("Accept", ""):
            # Only OpenMetrics carries exemplars (trace ids on the latency histograms).
            return web.Response(
                body=openmetrics.generate_latest(self.metrics.registry),  # type: ignore[no-untyped-call]
                headers={"Content-Type": openmetrics.CONTENT_TYPE_LATEST},
            )
        return web.Response(
            body=generate_latest(self.metrics.registry),
            headers={"Content-Type": CONTENT_TYPE_LATEST},
        )


async def _hide_versions(_: web.Request, response: web.StreamResponse) -> None:
    response.headers["Server"] = SERVER_HEADER


def _dumps(obj: object) -> str:
    return orjson.dumps(obj).decode()
