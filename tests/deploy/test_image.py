"""The worker image, built and run for real against the test broker.

The image is built from the repository's Dockerfile by scripts/build-image, on a
Debian-built stand-in for python:3.11-slim-bookworm (the public registries are out of
reach here; docs/DEVELOPING.md, "Stand-in images", says how the stand-in differs). The
containers use the host network, reach the broker on 127.0.0.1 and work on queues of
their own.

Each run mode (plain; locked down: read-only root, no capabilities, no privilege gain;
and locked down over mutual TLS to a broker of its own) gets the same checks: ready with
the fast masking engine, every conformance job answered exactly, the process running as
uid 10001, the HEALTHCHECK reporting healthy, /metrics counting, a bad job
dead-lettered, and SIGTERM draining to exit 0. A run mode is a row of RUN_MODES; more
are added there.
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
from tests.tls_node import CLIENT_IDENTITY, TlsNode, connections, tls_node
from worker.transport.link.topology import Topology
from worker.transport.producers.client import PromptClient

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
class Broker:
    """The broker a run mode's worker works on, and how the worker is pointed at it."""

    test_url: str  # the test's own connections: its client, drains and queue checks
    worker_env: Mapping[str, str]
    docker_args: tuple[str, ...] = ()  # the mounts the worker_env names


@dataclass(frozen=True)
class RunMode:
    name: str
    docker_args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    # The module fixture giving the Broker: a broker that only exists while its fixture
    # runs (an extra node, its certificates) cannot be written into the table itself.
    broker: str = "system_broker"


LOCKED_DOWN = ("--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges")

TLS_MODE = RunMode("tls", LOCKED_DOWN, broker="tls_broker")
RUN_MODES = [RunMode("plain"), RunMode("locked-down", LOCKED_DOWN), TLS_MODE]

# Where the TLS mode's secrets are mounted in the container.
SECRETS = "/run/secrets"
TLS_DIR = f"{SECRETS}/broker-tls"
URL_FILE = f"{SECRETS}/amqp-url"


@pytest.fixture(scope="module")
def system_broker() -> Broker:
    return Broker(AMQP_URL, {"PROMPT_WORKER_AMQP_URL": AMQP_URL})


@pytest.fixture(scope="module")
def image_tls_node() -> Iterator[TlsNode]:
    with tls_node("imagetls") as node:
        yield node


@pytest.fixture(scope="module")
def tls_broker(image_tls_node: TlsNode, tmp_path_factory: pytest.TempPathFactory) -> Broker:
    """A node demanding client certificates; the worker logs in with its certificate
    (EXTERNAL) and reads the URL and the certificates from files mounted read-only."""
    node = image_tls_node
    url_file = tmp_path_factory.mktemp("image-tls") / "amqp-url"
    url_file.write_text(node.url(external=True) + "\n")
    url_file.chmod(0o644)  # the container's uid 10001 reads it
    return Broker(
        node.node.url,
        {
            "PROMPT_WORKER_AMQP_URL_FILE": URL_FILE,
            "PROMPT_WORKER_TLS_CA_FILE": f"{TLS_DIR}/{node.ca.cert.name}",
            "PROMPT_WORKER_TLS_CERT_FILE": f"{TLS_DIR}/{node.client.cert.name}",
            "PROMPT_WORKER_TLS_KEY_FILE": f"{TLS_DIR}/{node.client.key.name}",
        },
        (
            "--volume",
            f"{node.directory}:{TLS_DIR}:ro",
            "--volume",
            f"{url_file}:{URL_FILE}:ro",
        ),
    )


@dataclass
class Served:
    """A worker container of one run mode on its own queues."""

    container: Container
    topology: Topology
    http_port: int
    mode: RunMode
    broker: Broker

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
        return PromptClient(self.broker.test_url, request_queue=self.topology.request_queue)


@pytest.fixture(scope="module")
def image() -> str:
    return built_image()


@contextlib.contextmanager
def serve(image: str, mode: RunMode, broker: Broker, label: str) -> Iterator[Served]:
    topology_names = unique_topology(label, broker.test_url)
    topo = next(topology_names)
    port = free_port()
    env = {
        **serve_env(topo, port, amqp_url=None),
        **broker.worker_env,
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
        *broker.docker_args,
        *mode.docker_args,
    ]
    try:
        with running(image, *args) as container:
            served = Served(container, topo, port, mode, broker)
            served.wait_ready()
            yield served
    finally:
        next(topology_names, None)


@pytest.fixture(scope="module", params=RUN_MODES, ids=lambda mode: mode.name)
def served(image: str, request: pytest.FixtureRequest) -> Iterator[Served]:
    mode: RunMode = request.param
    broker: Broker = request.getfixturevalue(mode.broker)
    with serve(image, mode, broker, "image") as result:
        yield result


def test_starts_ready_with_the_fast_masking_engine_and_loop(served: Served) -> None:
    starting = [e for e in served.container.log_events() if e.get("event") == "starting"]
    assert len(starting) == 1, served.container.logs()
    assert starting[0]["masking_engine"] == "libhs"
    assert starting[0]["event_loop"] == "uvloop"
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


@pytest.mark.parametrize("tokenizer", ["cl100k_base", "o200k_base"])
async def test_a_trimmed_prompt_is_counted_exactly_by_either_tokenizer(
    served: Served, tokenizer: str
) -> None:
    # The image installs the `tokenizers` extra: a budget's count is the encoding's own,
    # checked here against an independent implementation (bpe-openai's Rust BPE).
    import bpe_openai

    case = next(c for c in CASES if c["job"]["job_id"] == "case-1-31")
    job = {"budget": {"max_prompt_tokens": 600, "tokenizer": tokenizer}, **case["job"]}
    async with served.client() as client:
        reply = await client.build(job, timeout=REPLY_TIMEOUT)
    assert reply["status"] == "ok", reply
    budget, cache = reply["meta"]["budget"], reply["meta"]["cache"]
    assert (budget["tokenizer"], budget["trimmed"], budget["counted"]) == (tokenizer, True, True)
    encoding = bpe_openai.get_encoding(tokenizer)
    expected = sum(len(encoding.encode_ordinary(m["content"])) for m in reply["messages"])
    assert budget["prompt_tokens"] == cache["prompt_tokens"] == expected <= 600
    assert cache["tokenizer"] == tokenizer


def test_over_tls_the_worker_logs_in_with_its_certificate(
    image: str, image_tls_node: TlsNode, tls_broker: Broker
) -> None:
    with serve(image, TLS_MODE, tls_broker, "image-login"):
        rows = connections(image_tls_node.node)
    worker_rows = [row for row in rows if "prompt-worker " in row[3]]
    assert worker_rows, rows
    for user, ssl, mechanism, _ in worker_rows:
        assert (user, ssl, mechanism) == (CLIENT_IDENTITY, "true", "EXTERNAL")


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

    # A job is counted once it is settled, which comes after its reply: once its archive
    # record is confirmed too (docs/ARCHIVE.md).
    key = (case["job"]["kind"], "ok")
    after_text = ""

    async def counted() -> bool:
        nonlocal after_text
        status, after_text = served.http_get("/metrics")
        assert status == 200
        return jobs_answered(after_text).get(key, 0.0) > before.get(key, 0.0)

    await wait_for(counted, 30, "the job counted in /metrics")
    assert jobs_answered(after_text)[key] == before.get(key, 0.0) + 1
    assert "prompt_worker_ready 1.0" in after_text


async def test_a_bad_job_is_answered_and_dead_lettered(served: Served) -> None:
    body = b'{"job_id": "broken", "kind": '
    async with served.client() as client:
        reply = await client.build_bytes(body, timeout=REPLY_TIMEOUT)
    assert reply["status"] == "error"
    assert reply["error"]["code"] == "invalid_json"

    connection = await aio_pika.connect(served.broker.test_url)
    async with connection:
        channel = await connection.channel()
        [dead] = await drain(channel, served.topology.dead_letter_queue, 1)
    assert dead.body == body
    deaths: Any = dead.headers["x-death"]
    assert [death["reason"] for death in deaths] == ["rejected"]
    assert served.container.state()["Running"]


@pytest.mark.parametrize("mode", RUN_MODES, ids=lambda mode: mode.name)
def test_sigterm_drains_the_jobs_in_flight_and_exits_0(
    image: str, mode: RunMode, request: pytest.FixtureRequest
) -> None:
    broker: Broker = request.getfixturevalue(mode.broker)
    with serve(image, mode, broker, "image-drain") as served:
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
    connection = await aio_pika.connect(served.broker.test_url)
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


def test_a_cpu_limited_container_defaults_to_as_many_render_processes(image: str) -> None:
    """`render` and `rerender` start one process per usable core: in a container limited
    to one CPU, one, however many the host has."""
    probe = "from worker.commands.cores import usable_cores; print(usable_cores())"
    with running(
        image, "--cpus", "1", "--entrypoint", "python", command=("-c", probe)
    ) as container:
        assert container.wait_exit(within=60) == 0, container.logs()
        assert container.logs().strip() == "1"


def test_a_second_start_in_the_container_reads_the_cached_masking_database(image: str) -> None:
    """The image's user has no home: the masking database is cached in /tmp, so a
    restarted worker (or render helper) in the same container reads it back. A start
    that compiled it again would store it again: a new file in place of the old one."""
    database = (
        "import glob, os; print(os.stat(*glob.glob('/tmp/prompt-worker/hyperscan-*.db')).st_ino)"
    )
    script = (
        "set -e\n"
        "echo 'DB_PASSWORD=q7-Wx-91-zz' > /tmp/text\n"
        "prompt-worker mask /tmp/text 2>/dev/null\n"
        f'python -c "{database}"\n'
        "prompt-worker mask /tmp/text 2>/dev/null\n"
        f'python -c "{database}"\n'
    )
    with running(image, "--entrypoint", "sh", command=("-c", script)) as container:
        assert container.wait_exit(within=60) == 0, container.logs()
        lines = container.logs().splitlines()
    masked, first, again, second = lines
    assert "q7-Wx-91-zz" not in masked and "DB_PASSWORD=" in masked
    assert again == masked
    assert first == second, "the second start compiled the database again"
