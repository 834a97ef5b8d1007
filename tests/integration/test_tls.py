"""TLS to the broker, for real: a node with a TLS listener that demands client certificates.

The node and its certificates are those of tests/tls_node.py: a private CA, a client
certificate whose common name is a password-less user, another CA that signed nothing
the node shows, and a second listener on an address the certificate does not name.
`serve`, `PromptClient`, `replay-dead` and `rerender --broker` must verify the node, show
their certificate (with the EXTERNAL mechanism it is the whole identity) and refuse a
node they cannot verify with one line and exit 2.
"""

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import start_worker, topo
from tests.integration.helpers import REPO, StartWorker, a_job, archive_stream
from tests.rerender.files import conformance_lines, write_lines
from tests.tls_node import (
    CLIENT_IDENTITY,
    GOOD_HOST,
    UNNAMED_HOST,
    TlsNode,
    connections,
    tls_env,
)
from tests.tls_node import tls_node as start_tls_node
from worker.transport.link.topology import Topology
from worker.transport.producers.client import PromptClient, PromptClientError

__all__ = ["start_worker", "topo"]  # fixtures of the integration suite, used here

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def tls_node() -> Iterator[TlsNode]:
    with start_tls_node("tlsnode") as node:
        yield node


def prompt_worker(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("PROMPT_WORKER_")}
    return subprocess.run(
        [sys.executable, "-m", "worker", *args],
        cwd=REPO,
        env={**full_env, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def test_worker_and_client_speak_mutual_tls_and_the_certificate_is_the_identity(
    tls_node: TlsNode, topo: Topology, start_worker: StartWorker
) -> None:
    files = tls_node.files()
    worker = start_worker(amqp_url=tls_node.url(external=True), env=tls_env(files))
    await worker.wait_ready()

    async with PromptClient(
        tls_node.url(), request_queue=topo.request_queue, tls=files, timeout=60
    ) as client:
        reply = await client.build(a_job("tls-1"))
        assert reply["status"] == "ok", reply
        assert reply["job_id"] == "tls-1"

    # The archive's connection too (docs/ARCHIVE.md): over TLS, the job recorded.
    await worker.metrics_showing('prompt_worker_archive_records_total{outcome="written"} 1.0')
    rows = connections(tls_node.node)
    worker_rows = [row for row in rows if "prompt-worker " in row[3]]
    assert any(" archive" in row[3] for row in worker_rows), rows
    for user, ssl, mechanism, _ in worker_rows:
        assert (user, ssl, mechanism) == (CLIENT_IDENTITY, "true", "EXTERNAL")


async def test_replay_dead_and_rerender_connect_over_tls(
    tls_node: TlsNode, topo: Topology, start_worker: StartWorker, tmp_path: Path
) -> None:
    files = tls_node.files()
    env = {**tls_env(files), "PROMPT_WORKER_REQUEST_QUEUE": topo.request_queue}
    worker = start_worker(amqp_url=tls_node.url(), env=tls_env(files))
    await worker.wait_ready()

    # A bad job is dead-lettered; replay-dead over TLS lists it.
    async with PromptClient(
        tls_node.url(), request_queue=topo.request_queue, tls=files, timeout=60
    ) as client:
        reply = await client.build({"job_id": "tls-bad", "kind": "no-such-kind"})
        assert reply["status"] == "error", reply
    listed = ""
    for _ in range(100):
        result = prompt_worker(
            "replay-dead",
            "--dry-run",
            "--json",
            "--dead-letter-queue",
            topo.dead_letter,
            env={**env, "PROMPT_WORKER_AMQP_URL": tls_node.url()},
        )
        assert result.returncode == 0, result.stderr
        listed = result.stdout
        if "tls-bad" in listed:
            break
        await asyncio.sleep(0.1)
    assert '"job_id":"tls-bad"' in listed

    source = write_lines(tmp_path / "in.jsonl", conformance_lines()[:3])
    out = tmp_path / "out.jsonl"
    result = prompt_worker(
        "rerender",
        str(source),
        "--out",
        str(out),
        "--progress",
        "off",
        f"--broker={tls_node.url(external=True)}",
        "--tls-ca-file",
        str(files.ca_file),
        "--tls-cert-file",
        str(files.cert_file),
        "--tls-key-file",
        str(files.key_file),
        env={"PROMPT_WORKER_REQUEST_QUEUE": topo.request_queue},
    )
    assert result.returncode == 0, result.stderr
    assert len(out.read_text().splitlines()) == 3

    # The archive read back over TLS, with serve's PROMPT_WORKER_TLS_* variables: the
    # dead-lettered job and the three re-rendered ones were recorded.
    await worker.metrics_showing('prompt_worker_archive_records_total{outcome="written"} 4.0')
    page = tmp_path / "fleet.html"
    result = prompt_worker(
        "report",
        "--from-archive",
        tls_node.url(external=True),
        "--archive-stream",
        archive_stream(topo),
        "--since",
        "1h",
        "--html",
        str(page),
        "--progress",
        "off",
        env=tls_env(files),
    )
    assert result.returncode == 0, result.stderr
    assert "tls-bad" in page.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("host", "trusted", "because"),
    [
        (GOOD_HOST, "other", "self-signed certificate in certificate chain"),
        (UNNAMED_HOST, "test", "certificate is not valid for '127.0.0.2'"),
    ],
    ids=["signed-by-another-ca", "host-not-in-certificate"],
)
async def test_a_broker_that_cannot_be_verified_is_refused_in_one_line_with_exit_2(
    tls_node: TlsNode,
    topo: Topology,
    start_worker: StartWorker,
    tmp_path: Path,
    host: str,
    trusted: str,
    because: str,
) -> None:
    files = tls_node.files(ca=tls_node.other_ca if trusted == "other" else tls_node.ca)
    url = tls_node.url(host)
    env = {**tls_env(files), "PROMPT_WORKER_AMQP_URL": url}

    worker = start_worker(amqp_url=url, env=tls_env(files))
    assert await worker.wait_exit() == 2
    errors = [event for event in worker.log_events() if event.get("level") == "error"]
    assert [event["event"] for event in errors] == ["broker_tls_refused"]
    assert because in errors[0]["error"]
    assert "Traceback" not in worker.logs()

    replay = prompt_worker(
        "replay-dead", "--dry-run", "--dead-letter-queue", topo.dead_letter, env=env
    )
    assert replay.returncode == 2
    assert replay.stderr.count("\n") == 1, replay.stderr
    assert "TLS certificate was refused" in replay.stderr
    assert because in replay.stderr

    source = write_lines(tmp_path / "in.jsonl", conformance_lines()[:1])
    rerender = prompt_worker(
        "rerender", str(source), "--out", str(tmp_path / "out.jsonl"), "--progress", "off",
        "--broker", env=env,
    )  # fmt: skip
    assert rerender.returncode == 2
    assert rerender.stderr.count("\n") == 1, rerender.stderr
    assert because in rerender.stderr

    with pytest.raises(PromptClientError, match="TLS certificate was refused"):
        async with PromptClient(url, request_queue=topo.request_queue, tls=files):
            pass


def test_a_client_without_a_certificate_is_turned_away(tls_node: TlsNode, topo: Topology) -> None:
    files = tls_node.files(client=False)
    env = {**tls_env(files), "PROMPT_WORKER_AMQP_URL": tls_node.url()}
    result = prompt_worker(
        "replay-dead", "--dry-run", "--dead-letter-queue", topo.dead_letter, env=env
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    # TLS 1.3: the node's alert may come before or after the client sees the reset.
    assert "certificate required" in result.stderr or "reset" in result.stderr
