"""What an operator sees when the broker cannot be used, from the real commands.

`serve` logs one line of its own per failed connection attempt (where, why, when it
tries again), backs off, and gives up with exit status 2 on wrong credentials;
`replay-dead` and `rerender --broker` print one line and exit 2; `PromptClient`
raises an exception that says which. None of them lets the client library's own
lines (URLs with their query, errno tuples, tracebacks) through.
"""

import contextlib
import itertools
import signal
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from yarl import URL

from tests.cli import prompt_worker
from tests.integration.helpers import (
    AMQP_URL,
    REPO,
    StartWorker,
    TcpProxy,
    WorkerProcess,
    a_job,
    close_connections_of,
    free_port,
    needs_broker,
    rabbitmqctl,
    wait_for,
)
from worker.transport.link.broker_failures import broker_address
from worker.transport.producers.client import (
    PromptAccessRefused,
    PromptBrokerUnreachable,
    PromptClient,
)

SECRET = "do-not-log-this-password"


def wrong_password_url() -> str:
    return AMQP_URL.replace("guest:guest@", f"guest:{SECRET}@", 1)


def closed_port_url() -> tuple[str, int]:
    port = free_port()
    return f"amqp://guest:{SECRET}@127.0.0.1:{port}/", port


def only_worker_lines(worker: WorkerProcess) -> list[dict[str, Any]]:
    """Every line the worker wrote: each must be one JSON event of the worker's own."""
    lines = worker.logs().splitlines()
    events = [orjson.loads(line) for line in lines]  # a traceback line would not parse
    library = [e for e in events if "logger" in e]
    assert not library, f"client library lines got through: {library}"
    assert SECRET not in worker.logs()
    return events


def named(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == name]


async def attempts(worker: WorkerProcess, count: int, after: int = 0) -> list[dict[str, Any]]:
    async def enough() -> bool:
        return len(named(worker.log_events(), "broker_unreachable")) >= after + count

    await wait_for(enough, 90, f"{count} failed connection attempts")
    return named(only_worker_lines(worker), "broker_unreachable")[after:]


def seconds(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(event["timestamp"]).timestamp()


async def test_an_unreachable_broker_is_one_line_per_attempt_with_backoff(
    start_worker: StartWorker,
) -> None:
    url, port = closed_port_url()
    worker = start_worker(amqp_url=url + "?reconnect_interval=0.2")
    lines = await attempts(worker, 5)
    for n, line in enumerate(lines, start=1):
        assert line["broker"] == f"127.0.0.1:{port}"
        assert line["error"] == "connection refused"
        assert line["attempt"] == n
        assert line["level"] == "warning"
    pauses = [line["retry_in_s"] for line in lines]
    # Doubling from 0.2 s, each cut by a fifth at most: 0.16-0.2, 0.32-0.4, 0.64-0.8 ...
    for n, pause in enumerate(pauses):
        assert 0.2 * 2**n * 0.8 - 0.05 <= pause <= 0.2 * 2**n + 0.05, pauses
    # The worker waited (at least) as long as it said before each next attempt.
    for line, following in itertools.pairwise(lines):
        assert seconds(following) - seconds(line) >= line["retry_in_s"] - 0.05

    worker.signal(signal.SIGTERM)
    assert await worker.wait_exit() == 0
    only_worker_lines(worker)


async def test_a_link_lost_mid_run_is_one_line_per_attempt_then_resumes(
    start_worker: StartWorker, client: PromptClient
) -> None:
    proxy = TcpProxy()
    await proxy.start()
    try:
        worker = start_worker(amqp_url=proxy.url + "?reconnect_interval=0.2")
        await worker.wait_ready()
        assert (await client.build(a_job("before"), timeout=60))["status"] == "ok"
        await proxy.stop()
        lines = await attempts(worker, 3)
        assert {line["broker"] for line in lines} == {f"127.0.0.1:{proxy.port}"}
        assert [line["attempt"] for line in lines] == [1, 2, 3]
        assert lines[0]["retry_in_s"] < lines[1]["retry_in_s"] < lines[2]["retry_in_s"]
        await proxy.start()
        await worker.wait_ready()
        assert (await client.build(a_job("after"), timeout=60))["status"] == "ok"
        events = only_worker_lines(worker)
        order = [e["event"] for e in events]
        assert order.index("broker_link_down") < order.index("broker_unreachable")
        assert order.index("broker_unreachable") < order.index("broker_reconnected")
    finally:
        await proxy.stop()


@needs_broker
async def test_wrong_credentials_are_one_line_and_exit_2(start_worker: StartWorker) -> None:
    worker = start_worker(amqp_url=wrong_password_url() + "?reconnect_interval=0.2")
    assert await worker.wait_exit() == 2
    events = only_worker_lines(worker)
    (refused,) = named(events, "broker_access_refused")
    assert refused["level"] == "error"
    assert refused["broker"] == AMQP_URL.split("@", 1)[1].split("/", 1)[0]
    assert "access refused" in refused["error"]
    assert not named(events, "broker_unreachable"), "wrong credentials were retried"


@contextlib.contextmanager
def broker_user(prefix: str, permissions: tuple[str, str, str]) -> Iterator[str]:
    """The URL of a user of the test's own on the shared broker, with `permissions`
    (configure, write, read) on "/"; the user is removed again at the end."""
    user, password = f"{prefix}-{uuid.uuid4().hex[:10]}", uuid.uuid4().hex
    rabbitmqctl("add_user", user, password)
    try:
        rabbitmqctl("set_permissions", "-p", "/", user, *permissions)
        yield f"amqp://{user}:{password}@{broker_address(AMQP_URL)}/?reconnect_interval=0.2"
    finally:
        rabbitmqctl("delete_user", user)


@needs_broker
async def test_credentials_revoked_while_running_stop_the_worker_with_exit_2(
    start_worker: StartWorker,
) -> None:
    with broker_user("test-revoked", (".*", ".*", ".*")) as url:
        worker = start_worker(amqp_url=url)
        await worker.wait_ready()
        # The password is rotated and the worker's connection dropped, as a broker
        # restart would: its reconnect presents the old password.
        user = URL(url).user
        assert user is not None
        rabbitmqctl("change_password", user, uuid.uuid4().hex)
        assert close_connections_of(worker.pid) == 1
        assert await worker.wait_exit() == 2
        events = only_worker_lines(worker)
        order = [e["event"] for e in events]
        assert order.index("broker_link_down") < order.index("broker_access_refused")
        assert order.count("broker_access_refused") == 1


@needs_broker
async def test_a_user_without_permissions_is_one_line_and_exit_2(
    start_worker: StartWorker,
) -> None:
    # A user that may log in and do nothing else.
    with broker_user("test-no-perms", ("^$", "^$", "^$")) as url:
        worker = start_worker(amqp_url=url)
        assert await worker.wait_exit() == 2
        events = only_worker_lines(worker)
        (refused,) = named(events, "broker_permission_refused")
        assert refused["level"] == "error"
        assert "ACCESS_REFUSED" in refused["error"]
        assert "Traceback" not in worker.logs()
        assert not named(events, "broker_link_down"), "a refusal for good was retried"


@needs_broker
async def test_wrong_credentials_stop_every_process_of_the_group(
    start_worker: StartWorker,
) -> None:
    worker = start_worker("--processes", "2", amqp_url=wrong_password_url())
    assert await worker.wait_exit() == 2
    assert len(named(worker.log_events(), "broker_access_refused")) >= 1


def test_replay_dead_without_a_broker_prints_one_line_and_no_table() -> None:
    url, port = closed_port_url()
    result = prompt_worker("replay-dead", "--dry-run", "--amqp-url", url)
    assert result.returncode == 2
    assert result.stdout == b""
    assert result.stderr.decode().splitlines() == [
        f"prompt-worker replay-dead: cannot reach the broker at 127.0.0.1:{port}: "
        "connection refused"
    ]


@needs_broker
def test_replay_dead_says_access_refused() -> None:
    result = prompt_worker("replay-dead", "--amqp-url", wrong_password_url())
    assert result.returncode == 2
    assert result.stdout == b""
    (line,) = result.stderr.decode().splitlines()
    assert line.startswith("prompt-worker replay-dead: access refused by the broker at ")
    assert SECRET not in line


@needs_broker
def test_rerender_through_the_broker_says_access_refused(tmp_path: Path) -> None:
    source = REPO / "tests" / "conformance" / "cases.jsonl"
    out = tmp_path / "out.jsonl"
    url = wrong_password_url()
    result = prompt_worker("rerender", str(source), "--out", str(out), f"--broker={url}",
                           "--progress", "off")  # fmt: skip
    assert result.returncode == 2
    (line,) = result.stderr.decode().splitlines()
    assert line.startswith("rerender: error: access refused by the broker at ")
    assert SECRET not in line


@needs_broker
async def test_the_client_raises_access_refused() -> None:
    with pytest.raises(PromptAccessRefused, match="access refused by the broker at "):
        async with PromptClient(wrong_password_url()):
            pass


async def test_the_client_raises_unreachable_with_where_and_why() -> None:
    url, port = closed_port_url()
    with pytest.raises(PromptBrokerUnreachable) as raised:
        async with PromptClient(url):
            pass
    assert str(raised.value) == (f"cannot reach the broker at 127.0.0.1:{port}: connection refused")
    assert not isinstance(raised.value, PromptAccessRefused)
    assert isinstance(raised.value, ConnectionError)  # as the library's error was
