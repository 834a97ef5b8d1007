"""The health and metrics server answers its three paths and nothing else, on the
address it was told to bind."""

import socket
from collections.abc import AsyncIterator

import aiohttp
import pytest

from worker.ops.http import SERVER_HEADER, HealthServer
from worker.ops.metrics import Metrics


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
async def server() -> AsyncIterator[HealthServer]:
    http = HealthServer("127.0.0.1", free_port(), Metrics("test"), lambda: {"connected": True})
    await http.start()
    yield http
    await http.stop()


async def fetch(
    port: int, path: str, method: str = "GET", host: str = "127.0.0.1"
) -> tuple[int, str, str]:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session,
        session.request(method, f"http://{host}:{port}{path}") as response,
    ):
        return response.status, response.headers.get("Server", ""), await response.text()


@pytest.mark.parametrize(
    ("path", "status"), [("/healthz", 200), ("/readyz", 200), ("/metrics", 200)]
)
async def test_the_three_paths_answer(server: HealthServer, path: str, status: int) -> None:
    assert (await fetch(server.port, path))[0] == status


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/index.html",
        "/metrics/",
        "/healthz/x",
        "/debug/pprof",
        "/%2e%2e/etc/passwd",
        "/static/",
    ],
)
async def test_anything_else_is_not_found(server: HealthServer, path: str) -> None:
    status, _, body = await fetch(server.port, path)
    assert status == 404
    assert "prompt_worker" not in body  # no metrics leak through another path


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
async def test_other_methods_on_the_three_paths_are_refused(
    server: HealthServer, method: str
) -> None:
    status, _, _ = await fetch(server.port, "/metrics", method)
    assert status == 405


async def test_the_server_header_names_no_versions(server: HealthServer) -> None:
    for path in ("/healthz", "/nope"):
        _, header, _ = await fetch(server.port, path)
        assert header == SERVER_HEADER
        assert "aiohttp" not in header and "Python" not in header


async def test_it_listens_only_on_the_address_it_was_given(server: HealthServer) -> None:
    # 127.0.0.2 is this machine too (all of 127/8 is loopback), but not the bound address.
    with pytest.raises(aiohttp.ClientConnectionError):
        await fetch(server.port, "/healthz", host="127.0.0.2")


async def test_an_openmetrics_scrape_sees_the_trace_id_exemplars() -> None:
    metrics = Metrics("test")
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    metrics.job_done(
        "react",
        "ok",
        "",
        seconds=0.002,
        request_bytes=100,
        render_seconds=0.0004,
        trace_id=trace_id,
    )
    http = HealthServer("127.0.0.1", free_port(), metrics, lambda: {"connected": True})
    await http.start()
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
            headers = {"Accept": "application/openmetrics-text; version=1.0.0"}
            url = f"http://127.0.0.1:{http.port}/metrics"
            async with session.get(url, headers=headers) as response:
                assert response.headers["Content-Type"].startswith("application/openmetrics-text")
                openmetrics_text = await response.text()
            async with session.get(url) as response:
                assert response.headers["Content-Type"].startswith("text/plain")
                plain_text = await response.text()
    finally:
        await http.stop()
    exemplar = f'# {{trace_id="{trace_id}"}} 0.002'
    job_bucket = next(
        line
        for line in openmetrics_text.splitlines()
        if line.startswith('prompt_worker_job_seconds_bucket{kind="react",le="0.002"}')
    )
    assert job_bucket.endswith(exemplar) or exemplar in job_bucket
    assert f'trace_id="{trace_id}"' in "".join(
        line
        for line in openmetrics_text.splitlines()
        if line.startswith("prompt_worker_render_seconds_bucket")
    )
    assert trace_id not in plain_text
