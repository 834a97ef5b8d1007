"""deploy/rabbitmq/users.json: the worker's least-privilege user and a read-only user for
dashboards.

Offline, the permission patterns are held against the names the worker declares (they
must match every one of them and nothing else). On a node of its own (the shared broker
is never reconfigured), the file is imported as an operator would, `serve` runs as the
worker user through a good job, a bad one (dead-lettered) and a `replay-dead`, and the
same user is shown to be unable to declare or read any other queue; the dashboards user
reads the management API but can change nothing, there or over AMQP.
"""

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aio_pika
import aiohttp
import pytest
from aiormq.exceptions import ChannelAccessRefused

from tests.integration.conftest import start_worker, topo
from tests.integration.helpers import REPO, StartWorker, a_job, wait_for
from tests.rabbit_nodes import ExtraNode, free_ports
from tests.tls_certs import shared_directory
from worker.transport.link import topology
from worker.transport.producers.client import PromptClient

__all__ = ["start_worker", "topo"]  # fixtures of the integration suite, used here

USERS = REPO / "deploy" / "rabbitmq" / "users.json"
WORKER_USER = "prompt-worker"
DASHBOARDS_USER = "prompt-worker-dashboards"
# Found free for this run (tests/rabbit_nodes.py): two suites on one machine never share one.
NODE_PORT = free_ports()
MANAGEMENT_PORT = free_ports()


def load() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(USERS.read_text(encoding="utf-8"))
    return loaded


def worker_permissions() -> dict[str, str]:
    entries: list[dict[str, str]] = [p for p in load()["permissions"] if p["user"] == WORKER_USER]
    (entry,) = entries
    return entry


# --- offline -----------------------------------------------------------------------


def test_the_worker_user_may_touch_exactly_the_worker_topology() -> None:
    patterns = worker_permissions()
    names = topology.rabbitmq_definitions()
    queues = {q["name"] for q in names["queues"]}
    exchanges = {e["name"] for e in names["exchanges"]}
    declared = queues | exchanges

    def allowed(kind: str) -> set[str]:
        candidates = declared | {"amq.default", "amq.topic", "other", "build-prompt-x"}
        candidates |= {f"{name}.x" for name in declared} | {f"x{name}" for name in declared}
        return {name for name in candidates if re.search(patterns[kind], name)}

    # Declares its queues and the dead-letter exchange.
    assert allowed("configure") == declared
    # Publishes replies and replays through the default exchange; binds the dead-letter
    # queue (write on it) and names the dead-letter exchange in the request queue's
    # arguments (write on the exchange): both are called build-prompt.dead.
    assert allowed("write") == {"amq.default", topology.DEFAULT_DEAD_LETTER}
    # Consumes jobs; replay-dead reads the dead letters. Replies are never read by it.
    assert allowed("read") == {topology.DEFAULT_REQUEST_QUEUE, topology.DEFAULT_DEAD_LETTER}


def test_the_dashboards_user_has_the_monitoring_tag_and_no_resource_rights() -> None:
    users = {user["name"]: user for user in load()["users"]}
    assert users[DASHBOARDS_USER]["tags"] == ["monitoring"]
    assert users[WORKER_USER]["tags"] == []
    # Access to the virtual host (the management API shows its queues only then), but
    # patterns that match no queue or exchange name.
    (entry,) = [p for p in load()["permissions"] if p["user"] == DASHBOARDS_USER]
    for kind in ("configure", "write", "read"):
        assert not any(
            re.search(entry[kind], name) for name in ("build-prompt", "amq.default", "x", ".")
        )
    # No password ships with the file: each one is set by the operator.
    assert {user["password_hash"] for user in users.values()} == {""}


# --- on a node of its own ----------------------------------------------------------


def node_url(user: str, password: str) -> str:
    return f"amqp://{user}:{password}@127.0.0.1:{NODE_PORT}/"


@pytest.fixture(scope="module")
def provisioned() -> Iterator[tuple[ExtraNode, dict[str, str]]]:
    """A node with users.json imported and a fresh password for each user."""
    conf = f"management.tcp.port = {MANAGEMENT_PORT}\nmanagement.tcp.ip = 127.0.0.1\n"
    shared = shared_directory(Path(f"/tmp/prompt-worker-users-{uuid.uuid4().hex[:8]}"))
    try:
        copy = shared / "users.json"
        shutil.copy(USERS, copy)
        os.chmod(copy, 0o644)
        node = ExtraNode(
            "privnode", NODE_PORT, conf=conf, plugins=["rabbitmq_management"], fresh=True
        )
        with node:
            node.ctl("import_definitions", str(copy))
            passwords = {user: uuid.uuid4().hex for user in (WORKER_USER, DASHBOARDS_USER)}
            for user, password in passwords.items():
                node.ctl("change_password", user, password)
            yield node, passwords
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def replay_dead(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROMPT_WORKER_")}
    return subprocess.run(
        [sys.executable, "-m", "worker", "replay-dead", *args],
        cwd=REPO,
        env={**env, "PROMPT_WORKER_AMQP_URL": url},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def dead_letters(admin_url: str) -> int:
    connection = await aio_pika.connect(admin_url)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(topology.DEFAULT_DEAD_LETTER, passive=True)
        return queue.declaration_result.message_count or 0


@pytest.mark.slow
async def test_serve_and_replay_dead_run_with_the_worker_user_and_nothing_more(
    provisioned: tuple[ExtraNode, dict[str, str]], start_worker: StartWorker
) -> None:
    node, passwords = provisioned
    url = node_url(WORKER_USER, passwords[WORKER_USER])
    defaults = topology.Topology()
    worker = start_worker(
        amqp_url=url,
        env={
            "PROMPT_WORKER_REQUEST_QUEUE": defaults.request_queue,
            "PROMPT_WORKER_REPLY_QUEUE": defaults.reply_queue,
            "PROMPT_WORKER_DEAD_LETTER_QUEUE": defaults.dead_letter,
            "PROMPT_WORKER_ARCHIVE_STREAM": topology.default_archive().stream,
        },
    )
    await worker.wait_ready()

    # The producer is another user (here the node's guest), as in production.
    async with PromptClient(node.url, timeout=60) as client:
        ok = await client.build(a_job("least-1"))
        bad = await client.build({"job_id": "least-bad", "kind": "no-such-kind"})
    assert (ok["status"], bad["status"]) == ("ok", "error")

    async def dead_lettered() -> bool:
        return await dead_letters(node.url) == 1

    await wait_for(dead_lettered, 60, "the bad job in the dead-letter queue")

    listed = replay_dead(url, "--dry-run", "--json")
    assert listed.returncode == 0, listed.stderr
    assert '"job_id":"least-bad"' in listed.stdout
    replayed = replay_dead(url)
    assert replayed.returncode == 0, replayed.stderr
    assert "1 replayed" in replayed.stderr

    # The replayed job went back to the worker, which dead-letters it again.
    async def answered_twice() -> bool:
        return [e.get("job_id") for e in worker.log_events() if e.get("event") == "job"].count(
            "least-bad"
        ) == 2

    await wait_for(answered_twice, 60, "the replayed job to be handled again")
    assert "ACCESS_REFUSED" not in worker.logs()
    # Its permissions let it declare and write the archive stream: each answer recorded.
    await worker.metrics_showing('prompt_worker_archive_records_total{outcome="written"} 3.0')

    # Everything else is refused: declaring another queue, reading one it did not make.
    connection = await aio_pika.connect(node.url)
    async with connection:
        channel = await connection.channel()
        await channel.declare_queue("someone-else", durable=True)
    connection = await aio_pika.connect(url)
    async with connection:
        for name in ("not-the-workers", f"{defaults.request_queue}-2"):
            channel = await connection.channel()
            with pytest.raises(ChannelAccessRefused):
                await channel.declare_queue(name, durable=True)
        # Reading a queue it did not make, or even its own reply queue (not needed).
        for name in ("someone-else", defaults.reply_queue):
            channel = await connection.channel()
            queue = await channel.get_queue(name, ensure=False)
            with pytest.raises(ChannelAccessRefused):
                await queue.get(fail=False)
        # Publishing anywhere but through the default exchange.
        channel = await connection.channel()
        topic = await channel.get_exchange("amq.topic", ensure=False)
        with pytest.raises(ChannelAccessRefused):
            await topic.publish(aio_pika.Message(b"x"), routing_key="x")


@pytest.mark.slow
async def test_the_dashboards_user_reads_the_management_api_and_nothing_else(
    provisioned: tuple[ExtraNode, dict[str, str]],
) -> None:
    node, passwords = provisioned
    password = passwords[DASHBOARDS_USER]
    connection = await aio_pika.connect(node.url)
    async with connection:
        channel = await connection.channel()
        await channel.declare_queue("visible-to-dashboards", durable=True)
    # Over AMQP it may connect, and do nothing: declare, read, publish are all refused.
    connection = await aio_pika.connect(node_url(DASHBOARDS_USER, password), timeout=10)
    async with connection:
        channel = await connection.channel()
        with pytest.raises(ChannelAccessRefused):
            await channel.declare_queue("dashboards-declared", durable=True)
        channel = await connection.channel()
        queue = await channel.get_queue("visible-to-dashboards", ensure=False)
        with pytest.raises(ChannelAccessRefused):
            await queue.get(fail=False)
        channel = await connection.channel()
        with pytest.raises(ChannelAccessRefused):
            await channel.default_exchange.publish(
                aio_pika.Message(b"x"), routing_key="visible-to-dashboards"
            )

    api = f"http://127.0.0.1:{MANAGEMENT_PORT}/api"
    # Built by hand: aiohttp 3.10 (the lower bound) lacks encode_basic_auth, and newer
    # releases deprecate BasicAuth.
    credentials = base64.b64encode(f"{DASHBOARDS_USER}:{password}".encode()).decode()
    auth = {"Authorization": f"Basic {credentials}"}
    async with aiohttp.ClientSession(headers=auth, timeout=aiohttp.ClientTimeout(total=30)) as http:

        async def management_up() -> bool:
            try:
                async with http.get(f"{api}/overview") as response:
                    return response.status == 200
            except aiohttp.ClientError:
                return False

        await wait_for(management_up, 60, "the management API", interval=0.5)
        async with http.get(f"{api}/queues") as response:
            assert response.status == 200
            names = {queue["name"] for queue in await response.json()}
        assert "visible-to-dashboards" in names
        target = f"{api}/queues/%2F/visible-to-dashboards"
        async with http.delete(target) as response:
            assert response.status in (401, 403)
        async with http.put(f"{api}/queues/%2F/dashboards-made-this", json={}) as response:
            assert response.status in (401, 403)
        async with http.post(
            f"{target}/get", json={"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"}
        ) as response:
            assert response.status in (401, 403)
    queues = node.ctl("list_queues", "name", "--quiet").stdout.split()
    assert "visible-to-dashboards" in queues
    assert "dashboards-made-this" not in queues
