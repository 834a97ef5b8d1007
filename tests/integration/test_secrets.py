"""The broker password never shows: not in logs, /metrics, error messages, --help, nor
in the environment of the worker processes when it comes from a mounted file.

A canary password is put wherever a deployment puts the real one, the worker is run
with it (working, refused, unreachable, malformed, at debug level, supervised), jobs
good and bad go through, errors are provoked, every output is collected, and none may
contain the canary.
"""

import argparse
import contextlib
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.helpers import (
    AMQP_URL,
    BROKER_PORT,
    REPO,
    StartWorker,
    WorkerProcess,
    a_job,
    children,
    needs_broker,
    rabbitmqctl,
    wait_for,
)
from tests.rerender.files import conformance_lines, write_lines
from worker.cli import build_parser
from worker.transport.link.topology import Topology
from worker.transport.producers.client import PromptClient

CANARY = f"canary-{uuid.uuid4().hex}"
# Nothing listens here (a port of this test's range, which no node of the suite uses).
DEAD_PORT = 5699


@pytest.fixture
def canary_user(topo: Topology) -> Iterator[str]:
    """A user of the shared broker whose password is the canary, with rights on this
    test's queues only; deleted afterwards, also when the test fails."""
    name = f"test-secrets-{uuid.uuid4().hex[:10]}"
    prefix = re.escape(topo.request_queue.rsplit(".", 1)[0]) + r"\."
    rabbitmqctl("add_user", name, CANARY)
    try:
        rabbitmqctl(
            "set_permissions", "-p", "/", name, f"^{prefix}", rf"^({prefix}.*|amq\.default)$", f"^{prefix}"
        )  # fmt: skip
        yield name
    finally:
        rabbitmqctl("delete_user", name)


def url_with(user: str, port: int = BROKER_PORT) -> str:
    return f"amqp://{user}:{CANARY}@127.0.0.1:{port}/"


def secret_file(tmp_path: Path, url: str) -> Path:
    path = tmp_path / f"amqp-url-{uuid.uuid4().hex[:6]}"
    path.write_text(url + "\n")
    return path


def run_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "worker", *args],
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def scrape(worker: WorkerProcess, port: int | None = None) -> str:
    texts = []
    for path in ("/metrics", "/readyz", "/healthz", "/nothing-here"):
        status, body = await worker.http_get(path, port)
        texts.append(f"{path} {status}\n{body}")
    return "\n".join(texts)


async def stop(worker: WorkerProcess) -> None:
    worker.signal(signal.SIGTERM)
    await worker.wait_exit()


def proc_text(pid: int) -> str:
    parts = []
    for name in ("environ", "cmdline"):
        with contextlib.suppress(OSError):
            parts.append(Path(f"/proc/{pid}/{name}").read_bytes().decode(errors="replace"))
    return "\n".join(parts)


@needs_broker
async def test_a_working_worker_never_shows_the_password(
    start_worker: StartWorker, topo: Topology, canary_user: str, tmp_path: Path
) -> None:
    seen: list[str] = []
    url_file = secret_file(tmp_path, url_with(canary_user))
    # Supervised, so the password would also have to stay out of the workers' environment;
    # at debug level, the most the worker ever logs.
    worker = start_worker(
        "--processes",
        "2",
        amqp_url=None,
        env={"PROMPT_WORKER_AMQP_URL_FILE": str(url_file), "PROMPT_WORKER_LOG_LEVEL": "debug"},
    )
    for offset in (0, 1):
        await worker.wait_ready(port=worker.http_port + offset)
    async with PromptClient(AMQP_URL, request_queue=topo.request_queue, timeout=60) as client:
        ok = await client.build(a_job("secret-ok"))
        bad = await client.build({"job_id": "secret-bad", "kind": "no-such-kind"})
    assert (ok["status"], bad["status"]) == ("ok", "error")
    for offset in (0, 1):
        seen.append(await scrape(worker, worker.http_port + offset))
    pids = [worker.pid, *children(worker.pid)]
    assert len(pids) >= 3, pids  # the supervisor and its two workers
    seen += [proc_text(pid) for pid in pids]
    await stop(worker)
    seen.append(worker.logs())
    assert '"event":"job"' in worker.logs()  # the logs we searched are the real ones

    for text in seen:
        assert CANARY not in text


@needs_broker
def secret_env(tmp_path: Path, url: str) -> dict[str, str]:
    return {
        "PROMPT_WORKER_AMQP_URL_FILE": str(secret_file(tmp_path, url)),
        "PROMPT_WORKER_LOG_LEVEL": "debug",
    }


async def test_refused_unreachable_and_malformed_urls_never_show_the_password(
    start_worker: StartWorker, topo: Topology, tmp_path: Path
) -> None:
    seen: list[str] = []
    refused = url_with(f"no-such-user-{uuid.uuid4().hex[:6]}")
    unreachable = url_with("someone", DEAD_PORT)
    # Wrong credentials end the worker at once (exit 2); an unreachable broker is
    # retried, one line per attempt: both paths' output is searched.
    refused_worker = start_worker(amqp_url=None, env=secret_env(tmp_path, refused))
    assert await refused_worker.wait_exit() == 2
    seen.append(refused_worker.logs())

    worker = start_worker(amqp_url=None, env=secret_env(tmp_path, unreachable))
    await worker.wait_alive()

    async def failed_twice() -> bool:
        return worker.logs().count("broker_unreachable") >= 2

    await wait_for(failed_twice, 60, "two failed connection attempts in the log")
    seen.append(await scrape(worker))
    await stop(worker)
    seen.append(worker.logs())

    malformed = f"amqp://user:{CANARY}@[broken/"
    for env in (
        {"PROMPT_WORKER_AMQP_URL_FILE": str(secret_file(tmp_path, malformed))},
        {"PROMPT_WORKER_AMQP_URL": malformed},
        {"PROMPT_WORKER_AMQP_URL": f"http://user:{CANARY}@host/"},
    ):
        result = run_cli("serve", env=env)
        assert result.returncode == 2
        assert "PROMPT_WORKER_AMQP_URL" in result.stderr
        seen += [result.stdout, result.stderr]

    source = write_lines(tmp_path / "in.jsonl", conformance_lines()[:1])
    for url in (refused, unreachable):
        env = {"PROMPT_WORKER_AMQP_URL_FILE": str(secret_file(tmp_path, url))}
        replay = run_cli("replay-dead", "--dead-letter-queue", topo.dead_letter, env=env)
        rerender = run_cli(
            "rerender", str(source), "--out", str(tmp_path / "out.jsonl"), "--broker", env=env
        )
        assert (replay.returncode, rerender.returncode) == (2, 2)
        seen += [replay.stdout, replay.stderr, rerender.stdout, rerender.stderr]
    bad_flag = run_cli(
        "rerender", str(source), "--out", "x", f"--broker=http://u:{CANARY}@h/", env={}
    )
    assert bad_flag.returncode == 2
    seen.append(bad_flag.stderr)

    for text in seen:
        assert CANARY not in text


def test_no_help_text_shows_the_password() -> None:
    env = {"PROMPT_WORKER_AMQP_URL": url_with("someone")}
    commands = next(
        action.choices
        for action in build_parser()._actions
        if isinstance(action, argparse._SubParsersAction)
    )
    outputs = [run_cli("--help", env=env)]
    outputs += [run_cli(name, "--help", env=env) for name in commands]
    assert len(outputs) == 1 + len(commands) >= 9
    for result in outputs:
        assert result.returncode == 0, result.stderr
        assert CANARY not in result.stdout + result.stderr


def test_the_help_names_the_secret_file_options() -> None:
    for command in ("serve", "replay-dead"):
        text = run_cli(command, "--help", env={}).stdout
        assert "--amqp-url-file" in text
        assert "PROMPT_WORKER_AMQP_URL_FILE" in text
