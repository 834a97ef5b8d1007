"""Fixtures for tests against the real RabbitMQ (127.0.0.1:5672 unless
$PROMPT_WORKER_TEST_AMQP_URL says otherwise).

Every test gets its own uniquely named queues and exchange (`topo`), deleted again
afterwards, so tests can run next to each other and next to other users of the
broker. `start_worker` runs `python -m worker serve` as a real subprocess on them;
whatever a test leaves running is stopped at teardown.
"""

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Generator, Iterator
from pathlib import Path

import aio_pika
import pytest
from aio_pika.abc import AbstractChannel

from tests.integration.helpers import (
    AMQP_URL,
    CONFORMANCE_CONFIG,
    REPO,
    StartWorker,
    WorkerProcess,
    free_port,
    serve_env,
    unique_topology,
)
from tests.rabbit_nodes import ExtraCluster
from worker.transport.link.topology import Topology
from worker.transport.producers.client import PromptClient

# Set on a test whose body failed: its workers' logs are printed at teardown.
BODY_FAILED = pytest.StashKey[bool]()
# How much of a worker's log a failed test shows (its last lines).
LOG_LINES_SHOWN = 80


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call" and report.failed:
        item.stash[BODY_FAILED] = True
    return report


@pytest.fixture
def topo() -> Iterator[Topology]:
    """Unique queue and exchange names for one test; deleted afterwards."""
    yield from unique_topology("worker")


@pytest.fixture
def cluster(request: pytest.FixtureRequest) -> Iterator[ExtraCluster]:
    """Three clustered extra nodes (tests/rabbit_nodes.py), named after the test
    module's `CLUSTER_LABEL` ("cluster" by default). A test requests it before
    `start_worker`, so that it is torn down after the worker has stopped."""
    with ExtraCluster(getattr(request.module, "CLUSTER_LABEL", "cluster")) as running:
        yield running


@pytest.fixture
def start_worker(
    topo: Topology, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[StartWorker]:
    """Start `prompt-worker serve` on the test's queues: start_worker(*extra_args, env=...).

    Should the test fail, the end of each worker's log is printed (pytest shows it under
    "Captured stdout teardown"): a failure in CI can be read from CI's output alone."""
    started: list[WorkerProcess] = []

    def start(
        *args: str,
        env: dict[str, str] | None = None,
        config: Path | None = CONFORMANCE_CONFIG,
        amqp_url: str | None = AMQP_URL,
        entry: str = "worker",
    ) -> WorkerProcess:
        """amqp_url=None: the URL comes from `env` (e.g. PROMPT_WORKER_AMQP_URL_FILE);
        `entry`: the module run (`tests.faulty_serve` for a worker that breaks on request)."""
        port = free_port()
        full_env = {**os.environ, **serve_env(topo, port, amqp_url), **(env or {})}
        if config is not None:
            full_env["PROMPT_WORKER_CONFIG"] = str(config)
        log_path = tmp_path / f"worker-{len(started)}.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", entry, *(["serve"] if entry == "worker" else []), *args],
                cwd=REPO,
                env=full_env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        worker = WorkerProcess(
            process, int(full_env["PROMPT_WORKER_HTTP_PORT"]), log_path, full_env
        )
        started.append(worker)
        return worker

    yield start
    for worker in started:
        if worker.process.poll() is None:
            worker.signal(signal.SIGTERM)
            try:
                worker.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                worker.kill()
    if request.node.stash.get(BODY_FAILED, False):
        for number, worker in enumerate(started):
            tail = worker.logs().splitlines()[-LOG_LINES_SHOWN:]
            print(f"--- worker {number} (pid {worker.pid}): the last {len(tail)} log lines")
            print("\n".join(tail))


@pytest.fixture
async def client(topo: Topology) -> AsyncIterator[PromptClient]:
    async with PromptClient(AMQP_URL, request_queue=topo.request_queue) as prompt_client:
        yield prompt_client


@pytest.fixture
async def channel() -> AsyncIterator[AbstractChannel]:
    """A plain channel (publisher confirms) for publishing and inspecting queues."""
    connection = await aio_pika.connect(AMQP_URL)
    async with connection:
        yield await connection.channel()
