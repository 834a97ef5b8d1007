"""Helpers for the broker tests: worker subprocesses, queue inspection, waiting."""

import asyncio
import contextlib
import json
import os
import random
import re
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aio_pika
import aiohttp
import orjson
import pytest
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage
from yarl import URL

from tests.lanes import port_share

# Re-exported: the broker tests import everything about the broker from here.
from tests.unavailable import AMQP_URL as AMQP_URL
from tests.unavailable import broker_reachable as broker_reachable
from tests.unavailable import tool
from worker.transport.link.topology import Topology

# The port of the broker the tests use (the system's 5672, or the 4.0 node's).
BROKER_PORT = URL(AMQP_URL).port or 5672
REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
CONFORMANCE_CONFIG = TESTS / "conformance" / "worker.yaml"
# Generous deadlines: the machine is shared; these bound a hang, they time nothing.
READY_TIMEOUT = 60.0
REPLY_TIMEOUT = 60.0


F = TypeVar("F", bound=Callable[..., Any])


def needs_broker(test: F) -> F:
    """Mark a test as needing the broker (tests/unavailable.py: skipped where none
    answers, failed under CI=true)."""
    marked: F = pytest.mark.broker(test)
    return marked


def new_topology(label: str) -> Topology:
    """Queue and exchange names no other test uses (`test-LABEL-<random>.*`)."""
    prefix = f"test-{label}-{uuid.uuid4().hex[:10]}"
    return Topology(
        request_queue=f"{prefix}.build-prompt",
        reply_queue=f"{prefix}.replies",
        dead_letter=f"{prefix}.dead",
    )


def unique_topology(label: str, amqp_url: str = AMQP_URL) -> Iterator[Topology]:
    """Unique queue and exchange names for one test, deleted afterwards from the broker
    at `amqp_url` (fixture body)."""
    names = new_topology(label)
    yield names
    asyncio.run(delete_topology(names, amqp_url))


def serve_env(
    topology: Topology, http_port: int, amqp_url: str | None = AMQP_URL
) -> dict[str, str]:
    """The settings that put `prompt-worker serve` on a test's own queues and HTTP port
    (amqp_url=None: the caller gives the URL another way, e.g. a URL file)."""
    return {
        **({"PROMPT_WORKER_AMQP_URL": amqp_url} if amqp_url is not None else {}),
        "PROMPT_WORKER_REQUEST_QUEUE": topology.request_queue,
        "PROMPT_WORKER_REPLY_QUEUE": topology.reply_queue,
        "PROMPT_WORKER_DEAD_LETTER_QUEUE": topology.dead_letter,
        "PROMPT_WORKER_HTTP_PORT": str(http_port),
        "PROMPT_WORKER_HTTP_HOST": "127.0.0.1",
        "PROMPT_WORKER_LOG_FORMAT": "json",
        # Each test's own archive stream, never the shared broker's default one.
        "PROMPT_WORKER_ARCHIVE_STREAM": archive_stream(topology),
    }


def archive_stream(topology: Topology) -> str:
    """The archive stream of a test's topology (deleted with it)."""
    return f"{topology.request_queue}.archive"


_handed_out: set[int] = set()


# Below Linux's ephemeral range (32768-60999 by default): a port the OS picks for an
# outgoing connection (one of the many AMQP clients of a test) can never land on a
# port handed out here in the moment between the check and the worker's bind. Clear
# of the extra RabbitMQ nodes' ports (5800-7999 and their distribution ports
# 25800-27999, tests/rabbit_nodes.py) and of the stack's (9190, 15782, 15792).
_PORTS = port_share(range(10000, 15000))  # a lane's half (tests/lanes.py)


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port nobody listens on, never the same twice in this test run.

    The OS may hand a just-released port out again; a proxy that is not listening yet
    and a worker's HTTP server must not end up sharing one. Port + 1 is kept free too
    (`--processes 2` listens on port and port + 1).
    """
    while True:
        port = random.choice(_PORTS[:-1])  # port + 1 stays in this lane's share
        if {port, port + 1} & _handed_out:
            continue
        if _bindable(port) and _bindable(port + 1):
            _handed_out.update((port, port + 1))
            return port


async def delete_topology(topology: Topology, amqp_url: str = AMQP_URL) -> None:
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        for name in (*topology.queue_names(), archive_stream(topology)):
            channel = await connection.channel()
            with contextlib.suppress(Exception):
                await channel.queue_delete(name)
        channel = await connection.channel()
        with contextlib.suppress(Exception):
            await channel.exchange_delete(topology.dead_letter_exchange)


@dataclass
class WorkerProcess:
    """A `prompt-worker serve` subprocess and where its logs go."""

    process: subprocess.Popen[bytes]
    http_port: int
    log_path: Path
    env: dict[str, str] = field(repr=False)

    @property
    def pid(self) -> int:
        return self.process.pid

    def logs(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def log_events(self) -> list[dict[str, Any]]:
        events = []
        for line in self.logs().splitlines():
            with contextlib.suppress(orjson.JSONDecodeError):
                events.append(orjson.loads(line))
        return events

    def events(self, name: str) -> list[dict[str, Any]]:
        """The log lines of event `name`, in order."""
        return [e for e in self.log_events() if e.get("event") == name]

    def job_lines(self) -> list[dict[str, Any]]:
        return self.events("job")

    async def logged_jobs(self, count: int, within: float = 30.0) -> list[dict[str, Any]]:
        """The job lines, once there are `count`: a job's line is written after its reply
        went out and its record and settlement are done, a moment after its caller has the
        reply (or the dead-letter queue the job)."""

        async def logged() -> bool:
            return len(self.job_lines()) >= count

        await wait_for(logged, within, f"{count} job lines")
        return self.job_lines()

    def signal(self, sig: signal.Signals) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    async def wait_exit(self, within: float = 60.0) -> int:
        deadline = time.monotonic() + within
        while self.process.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"worker {self.pid} still running after {within} s")
            await asyncio.sleep(0.05)
        return self.process.returncode

    async def http_get(self, path: str, port: int | None = None) -> tuple[int, str]:
        url = f"http://127.0.0.1:{port or self.http_port}{path}"
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session,
            session.get(url) as response,
        ):
            return response.status, await response.text()

    async def metrics_showing(self, *lines: str, within: float = 15.0) -> str:
        """The /metrics exposition once it holds every one of `lines`. A reply reaches
        its caller before the worker counts the job, so a test reading the metrics right
        after its reply would race the counting."""
        return await self._metrics_once(
            lambda exposition: all(line in exposition for line in lines),
            f"/metrics to show {lines}",
            within,
        )

    async def metric_at_least(self, series: str, minimum: float, within: float = 15.0) -> str:
        """The /metrics exposition once `series` (name and labels) counts `minimum` or
        more. For a series exposed from the start at 0 (a counter with its labels set up
        front), waiting for its line alone would not wait for the count."""
        return await self._metrics_once(
            lambda exposition: series in exposition and metric_value(exposition, series) >= minimum,
            f"{series} to reach {minimum:g}",
            within,
        )

    async def _metrics_once(
        self, condition: Callable[[str], bool], what: str, within: float
    ) -> str:
        """The /metrics exposition once `condition` holds of it; on a timeout, the
        last exposition read is in the error."""
        exposition = ""

        async def holds() -> bool:
            nonlocal exposition
            _, exposition = await self.http_get("/metrics")
            return condition(exposition)

        try:
            await wait_for(holds, within, what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last exposition:\n{exposition}") from None
        return exposition

    async def readyz(self, port: int | None = None) -> int | None:
        """The /readyz status, or None while nothing answers."""
        try:
            status, _ = await self.http_get("/readyz", port)
        except (aiohttp.ClientError, TimeoutError):
            return None
        return status

    async def wait_alive(self, within: float = READY_TIMEOUT) -> None:
        """Until /healthz answers (raises at once if the process died)."""

        async def alive() -> bool:
            self._check_running()
            try:
                status, _ = await self.http_get("/healthz")
            except (aiohttp.ClientError, TimeoutError):
                return False
            return status == 200

        await wait_for(alive, within, f"worker {self.pid} to answer /healthz")

    def _check_running(self) -> None:
        if self.process.poll() is not None:
            raise AssertionError(
                f"worker exited with {self.process.returncode}:\n{self.logs()[-3000:]}"
            )

    async def wait_ready(self, within: float = READY_TIMEOUT, port: int | None = None) -> None:
        await wait_for(
            lambda: self._ready_or_dead(port), within, f"worker {self.pid} to become ready"
        )

    async def _ready_or_dead(self, port: int | None) -> bool:
        self._check_running()
        return await self.readyz(port) == 200


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


async def wait_for(
    condition: Callable[[], Awaitable[bool]], within: float, what: str, interval: float = 0.05
) -> None:
    deadline = time.monotonic() + within
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within} s waiting for {what}")
        await asyncio.sleep(interval)


StartWorker = Callable[..., WorkerProcess]


async def drain(
    channel: AbstractChannel, queue_name: str, count: int, within: float = REPLY_TIMEOUT
) -> list[AbstractIncomingMessage]:
    """Get exactly `count` messages from `queue_name` (acking them), waiting up to `within` s."""
    queue = await channel.get_queue(queue_name, ensure=False)
    messages: list[AbstractIncomingMessage] = []
    deadline = time.monotonic() + within
    while len(messages) < count:
        message = await queue.get(fail=False, timeout=5)
        if message is None:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{queue_name}: got {len(messages)} of {count} messages in {within} s"
                )
            await asyncio.sleep(0.05)
            continue
        await message.ack()
        messages.append(message)
    return messages


async def queue_depth(channel: AbstractChannel, name: str) -> int:
    declared = await channel.declare_queue(name, passive=True)
    count: int = declared.declaration_result.message_count or 0
    return count


# The scripts/rabbit-node node behind AMQP_URL when it is not the system broker (the
# RabbitMQ 4.0 node of scripts/ensure-rabbitmq4): rabbitmqctl must be that node's own.
BROKER_NODE = os.environ.get("PROMPT_WORKER_TEST_BROKER_NODE", "")


def rabbitmqctl(*args: str) -> str:
    """The output of a read-only or own-connection `rabbitmqctl` command, asked of the
    broker the tests use."""
    if BROKER_NODE:
        command = [str(REPO / "scripts" / "rabbit-node"), "ctl", BROKER_NODE]
    else:
        command = [
            tool("rabbitmqctl", "scripts/ensure-rabbitmq installs RabbitMQ, rabbitmqctl with it")
        ]
    return subprocess.run(
        [*command, *args], capture_output=True, text=True, check=True, timeout=60
    ).stdout


@contextlib.contextmanager
def own_vhost(prefix: str) -> Iterator[str]:
    """The AMQP URL of a virtual host of the test's own on the shared broker (its limits
    touch nobody else); deleted again at the end, with its queues."""
    vhost = f"{prefix}-{uuid.uuid4().hex[:10]}"
    rabbitmqctl("add_vhost", vhost)
    try:
        user = URL(AMQP_URL).user or "guest"
        rabbitmqctl("set_permissions", "-p", vhost, user, ".*", ".*", ".*")
        yield str(URL(AMQP_URL).with_path(f"/{vhost}"))
    finally:
        rabbitmqctl("delete_vhost", vhost)


def queue_names(vhost_url: str) -> list[str]:
    vhost = URL(vhost_url).path.lstrip("/")
    listing = rabbitmqctl("list_queues", "-p", vhost, "name", "-q")
    return [line.strip() for line in listing.splitlines() if line.strip() not in ("", "name")]


def connections_of(pid: int) -> list[str]:
    """The broker's ids of the connections worker process `pid` holds."""
    listing = rabbitmqctl("list_connections", "pid", "client_properties", "-q")
    return [
        connection
        for connection, _, properties in (line.partition("\t") for line in listing.splitlines())
        if f'pid {pid}"' in properties and "prompt-worker" in properties
    ]


def close_connections_of(pid: int, reason: str = "test") -> int:
    """Close the broker connections of worker process `pid` (as `rabbitmqctl
    close_all_connections` would, but only ours: the broker is shared)."""
    connections = connections_of(pid)
    for connection in connections:
        rabbitmqctl("close_connection", connection, reason)
    return len(connections)


def unacked_held_by(pid: int) -> int:
    """How many deliveries the broker has handed worker process `pid` and not seen
    settled. Stable while `pid` is stopped (SIGSTOP) with a backlog behind it: it can
    settle nothing, and its prefetch window is full."""
    connections = set(connections_of(pid))
    assert connections, f"worker {pid} holds no broker connection"
    listing = rabbitmqctl("list_channels", "connection", "messages_unacknowledged", "-q")
    held = 0
    for line in listing.splitlines():
        connection, _, count = line.partition("\t")
        if connection in connections and count.strip().isdigit():
            held += int(count)
    return held


def held_while_stopped(pid: int, within: float = 15.0) -> int:
    """SIGSTOP `pid` and return its unsettled deliveries once the count is steady.

    The broker's channel figures are refreshed by its statistics timer (5 s by
    default), so a first reading may still show a moment when the process had acked
    everything: a zero is read again until `within` has passed.
    """
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + within
    previous, held = -1, unacked_held_by(pid)
    while held != previous or (held == 0 and time.monotonic() < deadline):
        if held == previous:
            time.sleep(0.5)
        previous, held = held, unacked_held_by(pid)
    return held


def metric_value(exposition: str, series: str) -> float:
    """The value of one series (name and labels, as exposed) in a /metrics text."""
    match = re.search(rf"^{re.escape(series)} (\S+)$", exposition, re.MULTILINE)
    assert match, f"{series} not exposed"
    return float(match.group(1))


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


class TcpProxy:
    """A TCP forwarder to the broker that a test can cut and restore: a broker outage
    (or a broker that is not up yet) for one worker, without touching the shared broker."""

    def __init__(self, target_port: int = BROKER_PORT, port: int | None = None) -> None:
        self.target_port = target_port
        self.port = port or free_port()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def stop(self) -> None:
        """Stop listening and drop every forwarded connection, as a dying broker would."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    def pause(self) -> None:
        """Hold every byte in both directions, connections open: a stalled network."""
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            broker_r, broker_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            client_w.transport.abort()
            return
        self._writers.update((client_w, broker_w))
        await asyncio.gather(
            self._upstream(client_r, client_w, broker_w),
            self._pipe(broker_r, client_w),
            return_exceptions=True,
        )
        for writer in (client_w, broker_w):
            self._writers.discard(writer)
            writer.transport.abort()

    async def _upstream(
        self,
        client_r: asyncio.StreamReader,
        client_w: asyncio.StreamWriter,
        broker_w: asyncio.StreamWriter,
    ) -> None:
        """Client to broker (a proxy that plays the broker overrides this)."""
        await self._pipe(client_r, broker_w)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                await self._flowing.wait()
                writer.write(data)
                await writer.drain()
        finally:
            writer.transport.abort()


CASES = read_jsonl(TESTS / "conformance" / "cases.jsonl")


# An investigation (not chat) ReAct job: its prompt quotes the alert data and runbook.
BASE_CASE = next(c for c in CASES if c["job"]["kind"] == "react" and "chat" not in c["job"])


def a_job(job_id: str = "job-1", **session: Any) -> dict[str, Any]:
    """The base case's job under another id, with `session` fields replaced."""
    job: dict[str, Any] = json.loads(json.dumps(BASE_CASE["job"]))
    job["job_id"] = job_id
    job["session"].update(session)
    return job
