"""Helpers for the broker tests: worker subprocesses, queue inspection, waiting."""

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aio_pika
import aiohttp
import orjson
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage

from worker.topology import Topology

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
CONFORMANCE_CONFIG = TESTS / "conformance" / "worker.yaml"
AMQP_URL = os.environ.get("PROMPT_WORKER_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
# Generous deadlines: the machine is shared; these bound a hang, they time nothing.
READY_TIMEOUT = 60.0
REPLY_TIMEOUT = 60.0


def broker_reachable() -> bool:
    from urllib.parse import urlsplit

    parts = urlsplit(AMQP_URL)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 5672), 2):
            return True
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def delete_topology(topology: Topology) -> None:
    connection = await aio_pika.connect(AMQP_URL)
    async with connection:
        for name in topology.queue_names():
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

    async def readyz(self, port: int | None = None) -> int | None:
        """The /readyz status, or None while nothing answers."""
        try:
            status, _ = await self.http_get("/readyz", port)
        except (aiohttp.ClientError, TimeoutError):
            return None
        return status

    async def wait_ready(self, within: float = READY_TIMEOUT, port: int | None = None) -> None:
        await wait_for(
            lambda: self._ready_or_dead(port), within, f"worker {self.pid} to become ready"
        )

    async def _ready_or_dead(self, port: int | None) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(
                f"worker exited with {self.process.returncode}:\n{self.logs()[-3000:]}"
            )
        return await self.readyz(port) == 200


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


def close_connections_of(pid: int, reason: str = "test") -> int:
    """Close the broker connections of worker process `pid` (as `rabbitmqctl
    close_all_connections` would, but only ours: the broker is shared)."""
    listing = subprocess.run(
        ["rabbitmqctl", "list_connections", "pid", "client_properties", "-q"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    closed = 0
    for line in listing.splitlines():
        connection_pid, _, properties = line.partition("\t")
        if f'pid {pid}"' in properties and "prompt-worker" in properties:
            subprocess.run(
                ["rabbitmqctl", "close_connection", connection_pid, reason],
                capture_output=True,
                check=True,
                timeout=60,
            )
            closed += 1
    return closed


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
