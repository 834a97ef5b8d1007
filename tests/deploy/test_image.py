"""The worker image, built and run for real against the test broker.

The image is built from the repository's Dockerfile by scripts/build-image, on a
Debian-built stand-in for python:3.11-slim-bookworm (the public registries are out of
reach here; docs/OPERATIONS.md, "Stand-in images", says how the stand-in differs). The
containers use the host network, reach the broker on 127.0.0.1 and work on queues of
their own.

Each run mode (plain, and locked down: read-only root, no capabilities, no privilege
gain) gets the same checks: ready with the fast masking engine, every conformance job
answered exactly, the process running as uid 10001, the HEALTHCHECK reporting healthy,
/metrics counting, a bad job dead-lettered, and SIGTERM draining to exit 0. A run mode
is a row of RUN_MODES; more (TLS to the broker, say) are added there.
"""

import asyncio
import contextlib
import json
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import aio_pika
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.data import CONFORMANCE, SEED_000_KINDS, read_jsonl
from tests.deploy.docker_env import Container, built_image, image_config, running
from tests.integration.helpers import (
    AMQP_URL,
    drain,
    free_port,
    queue_depth,
    serve_env,
    unique_topology,
    wait_for,
)
from worker.transport.client import PromptClient
from worker.transport.topology import Topology

# A cold first build of the image (minutes) happens in the fixture when not done before.
pytestmark = [pytest.mark.slow, pytest.mark.broker, pytest.mark.timeout(1200)]

CONFIG_IN_IMAGE = "/etc/prompt-worker/worker.yaml"
CASES = [*read_jsonl(CONFORMANCE / "cases.jsonl"), *read_jsonl(CONFORMANCE / "families.jsonl")]
# Jobs above this size render in the offload helper process: with it low, the
# conformance jobs exercise both the inline and the helper path in every run mode.
OFFLOAD_BYTES = 2048
# Bounds for hangs on a shared machine; they time nothing.
READY_TIMEOUT = 90.0
REPLY_TIMEOUT = 60.0


@dataclass(frozen=True)
class RunMode:
    name: str
    docker_args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)


RUN_MODES = [
    RunMode("plain"),
    RunMode(
        "locked-down",
        (
            "--read-only",
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
        ),
    ),
]


@dataclass
class Served:
    """A worker container of one run mode on its own queues."""

    container: Container
    topology: Topology
    http_port: int
    mode: RunMode

    def http_get(self, path: str) -> tuple[int, str]:
        url = f"http://127.0.0.1:{self.http_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return int(response.status), response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            if not self.container.state()["Running"]:
                raise AssertionError(f"container exited:\n{self.container.logs()[-3000:]}")
            with contextlib.suppress(OSError):
                if self.http_get("/readyz")[0] == 200:
                    return
            if time.monotonic() > deadline:
                raise AssertionError(f"not ready in {READY_TIMEOUT} s:\n{self.container.logs()}")
            time.sleep(0.2)

    def client(self) -> PromptClient:
        return PromptClient(AMQP_URL, request_queue=self.topology.request_queue)


@pytest.fixture(scope="module")
def image() -> str:
    return built_image()


@contextlib.contextmanager
def serve(image: str, mode: RunMode, label: str) -> Iterator[Served]:
    topology_names = unique_topology(label)
    topo = next(topology_names)
    port = free_port()
    env = {
        **serve_env(topo, port),
        "PROMPT_WORKER_OFFLOAD_BYTES": str(OFFLOAD_BYTES),
        **mode.env,
    }
    args = [
        "--network",
        "host",
        # The image's HEALTHCHECK command as built; only its cadence is shortened, so the
        # test need not wait out the image's 15 s interval.
        "--health-interval",
        "1s",
        "--volume",
        f"{CONFORMANCE / 'worker.yaml'}:{CONFIG_IN_IMAGE}:ro",
        *(item for name, value in env.items() for item in ("--env", f"{name}={value}")),
        *mode.docker_args,
    ]
    try:
        with running(image, *args) as container:
            served = Served(container, topo, port, mode)
            served.wait_ready()
            yield served
    finally:
        next(topology_names, None)


@pytest.fixture(scope="module", params=RUN_MODES, ids=lambda mode: mode.name)
def served(image: str, request: pytest.FixtureRequest) -> Iterator[Served]:
    with serve(image, request.param, "image") as result:
        yield result


def test_starts_ready_with_the_fast_masking_engine(served: Served) -> None:
    starting = [e for e in served.container.log_events() if e.get("event") == "starting"]
    assert len(starting) == 1, served.container.logs()
    assert starting[0]["masking_engine"] == "libhs"
    assert served.http_get("/readyz")[0] == 200


async def test_every_conformance_job_is_answered_exactly(served: Served) -> None:
    kinds = {case["job"]["kind"] for case in CASES}
    assert kinds > SEED_000_KINDS  # the seed-000 kinds and the other families' kinds
    async with served.client() as client:
        replies = await asyncio.gather(
            *(client.build(case["job"], timeout=REPLY_TIMEOUT) for case in CASES)
        )
    for case, reply in zip(CASES, replies, strict=True):
        assert reply["status"] == "ok", reply
        assert reply["job_id"] == case["job"]["job_id"]
        assert reply["messages"] == case["expected_messages"], case["job"]["job_id"]


def test_the_worker_process_runs_as_uid_10001(served: Served) -> None:
    status = served.container.exec("cat", "/proc/1/status")
    ids = {line.split(":")[0]: line.split()[1:] for line in status.splitlines() if ":" in line}
    assert ids["Uid"] == ["10001"] * 4
    assert ids["Gid"] == ["10001"] * 4
    assert served.container.exec("cat", "/proc/1/comm").strip().startswith("prompt-worker")


def test_the_healthcheck_reports_healthy(served: Served) -> None:
    served.container.wait_health("healthy", within=60)


def jobs_answered(metrics_text: str) -> dict[tuple[str, str], float]:
    counts: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name == "prompt_worker_jobs_total":
                key = (sample.labels["kind"], sample.labels["status"])
                counts[key] = counts.get(key, 0.0) + sample.value
    return counts


async def test_metrics_count_the_jobs_answered(served: Served) -> None:
    status, before_text = served.http_get("/metrics")
    assert status == 200
    before = jobs_answered(before_text)
    case = CASES[0]
    async with served.client() as client:
        reply = await client.build(case["job"], timeout=REPLY_TIMEOUT)
    assert reply["status"] == "ok"

    status, after_text = served.http_get("/metrics")
    assert status == 200
    after = jobs_answered(after_text)
    key = (case["job"]["kind"], "ok")
    assert after[key] == before.get(key, 0.0) + 1
    assert "prompt_worker_ready 1.0" in after_text


async def test_a_bad_job_is_answered_and_dead_lettered(served: Served) -> None:
    body = b'{"job_id": "broken", "kind": '
    async with served.client() as client:
        reply = await client.build_bytes(body, timeout=REPLY_TIMEOUT)
    assert reply["status"] == "error"
    assert reply["error"]["code"] == "invalid_json"

    connection = await aio_pika.connect(AMQP_URL)
    async with connection:
        channel = await connection.channel()
        [dead] = await drain(channel, served.topology.dead_letter_queue, 1)
    assert dead.body == body
    deaths: Any = dead.headers["x-death"]
    assert [death["reason"] for death in deaths] == ["rejected"]
    assert served.container.state()["Running"]


@pytest.mark.parametrize("mode", RUN_MODES, ids=lambda mode: mode.name)
def test_sigterm_drains_the_jobs_in_flight_and_exits_0(image: str, mode: RunMode) -> None:
    with serve(image, mode, "image-drain") as served:
        answered, left, dead = asyncio.run(publish_then_terminate(served))
        # Every job was either answered or is still queued for the next worker.
        assert answered + left == len(CASES)
        assert dead == 0
        assert served.container.state()["ExitCode"] == 0, served.container.logs()
        events = [e.get("event") for e in served.container.log_events()]
        assert events.index("signal_received") < events.index("stopping") < events.index("stopped")


async def publish_then_terminate(served: Served) -> tuple[int, int, int]:
    """Publish every case, SIGTERM once the first reply is out; (answered, queued, dead)."""
    topo = served.topology
    connection = await aio_pika.connect(AMQP_URL)
    async with connection:
        channel = await connection.channel()
        for case in CASES:
            await channel.default_exchange.publish(
                aio_pika.Message(orjson.dumps(case["job"])), routing_key=topo.request_queue
            )
        # Stop as soon as the worker has started on the jobs, not after it is done.
        await drain(channel, topo.reply_queue, 1)
        served.container.kill("TERM")
        await asyncio.to_thread(served.container.wait_exit, 60)

        async def counts() -> tuple[int, int, int]:
            return (
                1 + await queue_depth(channel, topo.reply_queue),
                await queue_depth(channel, topo.request_queue),
                await queue_depth(channel, topo.dead_letter_queue),
            )

        # The broker requeues what the closed connection left unacknowledged a moment
        # after the exit; until then a job may be in neither queue.
        await wait_for(
            lambda: _settled(counts), REPLY_TIMEOUT, "every job answered or queued again"
        )
        return await counts()


async def _settled(counts: Callable[[], Awaitable[tuple[int, int, int]]]) -> bool:
    answered, queued, _ = await counts()
    return answered + queued >= len(CASES)


def test_the_image_holds_no_build_tools(image: str) -> None:
    """The final stage has the worker's venv and Python, not pip, a compiler or tests."""
    probe = (
        "import importlib.util, json, os, shutil, subprocess, sys\n"
        "base = os.path.realpath(sys.executable)\n"
        "print(json.dumps({\n"
        "  'venv_modules': [m for m in ('pip', 'setuptools', 'pytest', 'tests')\n"
        "                   if importlib.util.find_spec(m)],\n"
        "  'base_pip': subprocess.run([base, '-c', 'import pip'],\n"
        "                             capture_output=True).returncode == 0,\n"
        "  'tools': [t for t in ('pip', 'pip3', 'gcc', 'cc', 'make') if shutil.which(t)],\n"
        "}))\n"
    )
    with running(image, "--entrypoint", "python", command=("-c", probe)) as container:
        assert container.wait_exit(within=60) == 0, container.logs()
        found = json.loads(container.logs())
    assert found == {"venv_modules": [], "base_pip": False, "tools": []}
    config = image_config(image)
    assert config["User"] == "10001:10001"
