"""`prompt-worker rerender --broker` against the real RabbitMQ and real `serve` workers.

Each test has its own queues (the `topo` fixture of the integration suite, deleted
afterwards); the rerender run's own reply queue is exclusive and goes with its
connection.
"""

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import aio_pika
import pytest
from aio_pika.abc import AbstractIncomingMessage
from yarl import URL

from tests.aio_pika_topology import declare_topology
from tests.data import CONFORMANCE, REPO
from tests.integration.conftest import start_worker, topo
from tests.integration.helpers import (
    AMQP_URL,
    StartWorker,
    TcpProxy,
    WorkerProcess,
    drain,
    own_vhost,
    queue_depth,
    queue_names,
    rabbitmqctl,
    wait_for,
)
from tests.rerender.files import conformance_lines, records, write_lines
from worker.cli import main
from worker.render.config import load_config
from worker.render.renderer import Renderer
from worker.render.replies import DEFAULT_MAX_MESSAGE_BYTES
from worker.transport.link.topology import Topology
from worker.transport.producers.client import PromptClient
from worker.transport.producers.replay import describe

__all__ = ["start_worker", "topo"]  # fixtures of the integration suite, used here

pytestmark = pytest.mark.broker

CONFIG = str(CONFORMANCE / "worker.yaml")
WORKER = [sys.executable, "-m", "worker"]
DEADLINE = 300.0


def mixed_input(path: Path, copies: int = 1) -> Path:
    """Conformance cases plus a blank line and bad lines, which are never published."""
    lines = conformance_lines() * copies
    lines[5:5] = ["{not json", "", "[1, 2]", '{"job": {"job_id": "no-kind"}, "messages": []}']
    return write_lines(path, lines)


def argv(source: Path, out: Path, *options: str) -> list[str]:
    return ["rerender", str(source), "--out", str(out), "--progress", "off", *options]


def local_reference(source: Path, out: Path) -> bytes:
    assert main(argv(source, out, "--config", CONFIG, "--workers", "1")) == 1  # the bad lines
    return out.read_bytes()


def broker_args(topology: Topology, *extra: str) -> list[str]:
    return [f"--broker={AMQP_URL}", "--request-queue", topology.request_queue, *extra]


def wait_ready(*workers: WorkerProcess) -> None:
    for worker in workers:
        asyncio.run(worker.wait_ready())


def rerender_reply_queues(vhost: str = "/") -> list[str]:
    listing = rabbitmqctl("list_queues", "-p", vhost, "name", "-q")
    return [n for n in listing.split() if n.startswith("prompt-worker.rerender.")]


def wait_for_output(out: Path, process: "subprocess.Popen[bytes]") -> None:
    deadline = time.monotonic() + DEADLINE
    while not (out.exists() and out.stat().st_size > 0):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.01)


@dataclass
class Run:
    """A `rerender --broker` run in a subprocess, past its first written records."""

    process: "subprocess.Popen[bytes]"
    source: Path
    out: Path
    report: Path
    expected: bytes  # what the local engine writes for the same input


def start_run(tmp_path: Path, broker: Sequence[str], timeout: str = "30") -> Run:
    """Start a run over 20 copies of the mixed input (a worker must be consuming)."""
    source = mixed_input(tmp_path / "in.jsonl", copies=20)
    expected = local_reference(source, tmp_path / "local.jsonl")
    out, report = tmp_path / "broker.jsonl", tmp_path / "report.json"
    options = ("--report", str(report), *broker, "--window", "64", "--timeout", timeout)
    process = subprocess.Popen(
        [*WORKER, *argv(source, out, *options)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    wait_for_output(out, process)
    return Run(process, source, out, report, expected)


@pytest.fixture
def no_consumer_queue(topo: Topology) -> Iterator[Topology]:
    """The fleet's queues, declared as `serve` declares them, with no worker on them."""

    async def declare_queues() -> None:
        connection = await aio_pika.connect(AMQP_URL)
        async with connection:
            await declare_topology(await connection.channel(), topo)

    asyncio.run(declare_queues())
    yield topo


def test_local_and_broker_engines_write_identical_files(
    tmp_path: Path, topo: Topology, start_worker: StartWorker
) -> None:
    source = mixed_input(tmp_path / "in.jsonl")
    expected = local_reference(source, tmp_path / "local.jsonl")
    wait_ready(start_worker(), start_worker())
    out, report = tmp_path / "broker.jsonl", tmp_path / "report.json"
    code = main(argv(source, out, "--report", str(report), *broker_args(topo, "--window", "16")))
    assert code == 1
    assert out.read_bytes() == expected
    summary = json.loads(report.read_text())
    assert summary["engine"] == "broker"
    assert summary["broker"]["url"] == "amqp://guest:***@127.0.0.1:5672/"
    assert summary["totals"]["bad_lines"] == 2
    assert summary["totals"]["drift"]["same"] == len(conformance_lines())
    # Bad lines are never published; every job was, exactly once.
    assert summary["broker"]["published"] == len(conformance_lines()) + 1
    assert summary["broker"]["timeouts"] == 0
    # Like serve by default: uvloop (a dependency).
    assert summary["broker"]["event_loop"] == "uvloop"


def test_serves_loop_variable_applies_to_the_run(
    tmp_path: Path, topo: Topology, start_worker: StartWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = write_lines(tmp_path / "in.jsonl", conformance_lines()[:6])
    local = tmp_path / "local.jsonl"
    assert main(argv(source, local, "--config", CONFIG, "--workers", "1")) == 0
    wait_ready(start_worker())
    monkeypatch.setenv("PROMPT_WORKER_EVENT_LOOP", "asyncio")
    out, report = tmp_path / "broker.jsonl", tmp_path / "report.json"

    assert main(argv(source, out, "--report", str(report)) + broker_args(topo)) == 0

    assert out.read_bytes() == local.read_bytes()
    broker = json.loads(report.read_text())["broker"]
    assert broker["event_loop"] == "asyncio"


def test_a_bad_event_loop_variable_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write_lines(tmp_path / "in.jsonl", conformance_lines()[:1])
    monkeypatch.setenv("PROMPT_WORKER_EVENT_LOOP", "trio")
    code = main(argv(source, tmp_path / "out.jsonl", f"--broker={AMQP_URL}"))
    assert code == 2
    assert "PROMPT_WORKER_EVENT_LOOP: expected one of auto, uvloop, asyncio" in (
        capsys.readouterr().err
    )


def test_a_job_without_reply_is_retried_once_then_recorded_as_timeout(
    tmp_path: Path, no_consumer_queue: Topology, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write_lines(tmp_path / "in.jsonl", [*conformance_lines()[:2], "{bad"])
    out, report = tmp_path / "out.jsonl", tmp_path / "report.json"
    options = ("--report", str(report), *broker_args(no_consumer_queue, "--timeout", "0.5"))
    code = main(argv(source, out, *options))
    assert code == 1
    assert "no worker is consuming" in capsys.readouterr().err
    written = records(out)
    assert len(written) == 3
    for record, text in zip(written[:2], conformance_lines()[:2], strict=True):
        assert record is not None
        assert record["job_id"] == json.loads(text)["job"]["job_id"]
        assert record["error"]["code"] == "timeout"
        assert record["error"]["message"] == "no reply within 0.5 s (after 2 attempts)"
        assert record["drift"] == "error"
    assert written[2] is not None and written[2]["bad_line"] is True
    broker = json.loads(report.read_text())["broker"]
    assert (broker["published"], broker["retries"], broker["timeouts"]) == (4, 2, 2)


def test_jobs_the_run_gave_up_on_expire_and_a_worker_started_later_renders_none(
    tmp_path: Path, no_consumer_queue: Topology, start_worker: StartWorker
) -> None:
    """No worker during the run: its jobs must not wait in the request queue for the
    next worker, which would render them for a reply queue that is gone."""
    topology = no_consumer_queue
    source = write_lines(tmp_path / "in.jsonl", conformance_lines()[:2])
    out = tmp_path / "out.jsonl"
    assert main(argv(source, out, *broker_args(topology, "--timeout", "0.5"))) == 1
    assert [r["error"]["code"] for r in records(out) if r] == ["timeout", "timeout"]

    async def expired() -> list[AbstractIncomingMessage]:
        connection = await aio_pika.connect(AMQP_URL)
        async with connection:
            channel = await connection.channel()

            async def request_queue_empty() -> bool:
                return await queue_depth(channel, topology.request_queue) == 0

            # Each of the 2 x 2 publishes expires when the run would have given up on it.
            await wait_for(request_queue_empty, 30, "the run's jobs to expire")
            # The queue's dead-letter exchange takes them, saying why: never rendered.
            return await drain(channel, topology.dead_letter_queue, 4, within=30)

    dead = asyncio.run(expired())
    letters = [describe(message.body, message.headers) for message in dead]
    assert {(letter.reason, letter.queue) for letter in letters} == {
        ("expired", topology.request_queue)
    }

    worker = start_worker()
    wait_ready(worker)

    async def answers_only_its_own_job() -> str:
        async with PromptClient(AMQP_URL, request_queue=topology.request_queue) as client:
            reply = await client.build(json.loads(conformance_lines()[0])["job"], timeout=60)
        assert reply["status"] == "ok"
        return await worker.metrics_showing('status="ok"')

    exposition = asyncio.run(answers_only_its_own_job())
    jobs = [
        line for line in exposition.splitlines() if line.startswith("prompt_worker_jobs_total{")
    ]
    assert sum(float(line.rsplit(" ", 1)[1]) for line in jobs) == 1, jobs
    assert "reply_unroutable" not in worker.logs()


def test_missing_request_queue_exits_2(tmp_path: Path, topo: Topology) -> None:
    source = write_lines(tmp_path / "in.jsonl", conformance_lines()[:1])
    result = subprocess.run(
        [*WORKER, *argv(source, tmp_path / "o", *broker_args(topo))],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert f"the request queue {topo.request_queue!r} does not exist" in result.stderr


async def test_duplicate_replies_are_written_once(tmp_path: Path, topo: Topology) -> None:
    """A worker that answers every job twice (as a redelivery would): one record each."""
    source = mixed_input(tmp_path / "in.jsonl")
    expected = local_reference(source, tmp_path / "local.jsonl")
    renderer = Renderer(load_config(CONFIG))
    connection = await aio_pika.connect(AMQP_URL)
    async with connection:
        channel = await connection.channel()
        queue = (await declare_topology(channel, topo)).request_queue

        async def answer_twice(message: AbstractIncomingMessage) -> None:
            body = renderer.render(message.body).body
            # Both sent back to back, so each twin lands right behind its first.
            await asyncio.gather(
                *(
                    channel.default_exchange.publish(
                        aio_pika.Message(body, correlation_id=message.correlation_id),
                        routing_key=message.reply_to or "",
                    )
                    for _ in range(2)
                )
            )
            await message.ack()

        await queue.consume(answer_twice)
        report = tmp_path / "report.json"
        out = tmp_path / "out.jsonl"
        process = await asyncio.create_subprocess_exec(
            *WORKER, *argv(source, out, "--report", str(report), *broker_args(topo)), cwd=REPO
        )
        assert await asyncio.wait_for(process.wait(), DEADLINE) == 1
    assert out.read_bytes() == expected
    broker = json.loads(report.read_text())["broker"]
    # The twin of the last reply may still be on its way when the run ends.
    jobs = len(conformance_lines()) + 1
    assert jobs - 1 <= broker["duplicate_replies"] <= jobs


@pytest.mark.slow
def test_worker_killed_mid_run_and_restarted_still_completes_every_job(
    tmp_path: Path, topo: Topology, start_worker: StartWorker
) -> None:
    first = start_worker()
    wait_ready(first)
    run = start_run(tmp_path, broker_args(topo))
    rerender, out, expected = run.process, run.out, run.expected
    first.signal(signal.SIGKILL)
    first.process.wait(timeout=30)
    assert rerender.poll() is None, "the run ended before the worker was killed"
    written_while_down = out.read_bytes().count(b"\n")
    wait_ready(start_worker())
    _, err = rerender.communicate(timeout=DEADLINE)
    assert rerender.returncode == 1, err  # the bad lines
    assert out.read_bytes() == expected
    assert written_while_down < expected.count(b"\n")
    summary = json.loads(run.report.read_text())
    assert summary["broker"]["timeouts"] == 0
    assert summary["totals"]["records"] + summary["totals"]["blank_lines"] == expected.count(b"\n")


@pytest.mark.slow
async def test_broker_lost_mid_run_exits_2_and_resume_completes_the_file(
    tmp_path: Path, topo: Topology, start_worker: StartWorker
) -> None:
    source = mixed_input(tmp_path / "in.jsonl", copies=20)
    expected = local_reference(source, tmp_path / "local.jsonl")
    await start_worker().wait_ready()
    proxy = TcpProxy()
    await proxy.start()
    out = tmp_path / "broker.jsonl"
    process = await asyncio.create_subprocess_exec(
        *WORKER,
        *argv(source, out, f"--broker={proxy.url}", "--request-queue", topo.request_queue),
        cwd=REPO,
        stderr=asyncio.subprocess.PIPE,
    )
    deadline = time.monotonic() + DEADLINE
    while not (out.exists() and out.stat().st_size > 0):
        assert process.returncode is None and time.monotonic() < deadline
        await asyncio.sleep(0.01)
    await proxy.stop()  # as a dying broker would: every connection dropped
    _, err = await asyncio.wait_for(process.communicate(), DEADLINE)
    assert process.returncode == 2, err
    message = err.decode().splitlines()[-1]
    assert message.startswith("rerender: error: lost the connection to the broker")
    assert message.endswith("re-run with --resume to continue")
    partial = out.read_bytes()
    assert partial.endswith(b"\n") and expected.startswith(partial) and partial != expected

    resumed = await asyncio.create_subprocess_exec(
        *WORKER, *argv(source, out, "--resume", *broker_args(topo)), cwd=REPO
    )
    assert await asyncio.wait_for(resumed.wait(), DEADLINE) == 1  # the bad lines
    assert out.read_bytes() == expected


@pytest.mark.slow
async def test_a_node_lost_mid_run_is_left_for_the_next_address_and_the_run_completes(
    tmp_path: Path, topo: Topology, start_worker: StartWorker
) -> None:
    """Two "nodes" (TCP proxies in front of the shared broker): the one the run is on
    dies and stays down. The run reconnects through the other, publishes again what was
    waiting, and writes the whole file."""
    source = mixed_input(tmp_path / "in.jsonl", copies=20)
    expected = local_reference(source, tmp_path / "local.jsonl")
    await start_worker().wait_ready()
    first, second = TcpProxy(), TcpProxy()
    await first.start()
    await second.start()
    out, report = tmp_path / "broker.jsonl", tmp_path / "report.json"
    try:
        process = await asyncio.create_subprocess_exec(
            *WORKER,
            *argv(source, out, "--report", str(report), f"--broker={first.url},{second.url}"),
            "--request-queue",
            topo.request_queue,
            cwd=REPO,
            stderr=asyncio.subprocess.PIPE,
        )
        deadline = time.monotonic() + DEADLINE
        while not (out.exists() and out.stat().st_size > 0):
            assert process.returncode is None and time.monotonic() < deadline
            await asyncio.sleep(0.01)
        await first.stop()  # the run's node dies, and stays down
        _, err = await asyncio.wait_for(process.communicate(), DEADLINE)
    finally:
        await first.stop()
        await second.stop()

    assert process.returncode == 1, err  # the bad lines
    assert out.read_bytes() == expected
    broker = json.loads(report.read_text())["broker"]
    assert broker["timeouts"] == 0
    assert broker["reconnects"] >= 1


@pytest.mark.slow
def test_reply_queue_deleted_mid_run_is_declared_again_and_the_run_completes(
    tmp_path: Path, topo: Topology, start_worker: StartWorker
) -> None:
    """An operator deletes the run's reply queue: the run declares it again, consumes
    it, and retries what was answered into nowhere meanwhile."""
    worker = start_worker()
    wait_ready(worker)
    run = start_run(tmp_path, broker_args(topo), timeout="10")
    rerender, out, expected = run.process, run.out, run.expected
    # Stopped, the worker cannot finish the run before the queue is gone.
    worker.signal(signal.SIGSTOP)
    try:
        [reply_queue] = rerender_reply_queues()
        rabbitmqctl("delete_queue", reply_queue)
    finally:
        worker.signal(signal.SIGCONT)
    assert rerender.poll() is None, "the run ended before its reply queue was deleted"
    _, err = rerender.communicate(timeout=DEADLINE)

    assert rerender.returncode == 1, err  # the bad lines
    assert out.read_bytes() == expected
    summary = json.loads(run.report.read_text())
    assert summary["broker"]["timeouts"] == 0


@pytest.mark.slow
def test_a_channel_the_broker_closed_ends_the_run_and_resume_completes_it(
    tmp_path: Path, topo: Topology, start_worker: StartWorker
) -> None:
    """The run's reply queue deleted and declaring it again refused (the vhost's queue
    limit): the broker closes the run's channel, which ends the run as a lost
    connection does, rather than recording every job left as a timeout."""
    with own_vhost("test-rerender-channel") as url:
        vhost = URL(url).path.lstrip("/")
        worker = start_worker(amqp_url=url)
        wait_ready(worker)
        broker = (f"--broker={url}", "--request-queue", topo.request_queue)
        run = start_run(tmp_path, broker)
        rerender, out, expected = run.process, run.out, run.expected
        worker.signal(signal.SIGSTOP)
        try:
            [reply_queue] = rerender_reply_queues(vhost)
            # Set first: the run declares its queue again as soon as it is deleted.
            limit = {"max-queues": len(queue_names(url)) - 1}
            rabbitmqctl("set_vhost_limits", "-p", vhost, json.dumps(limit))
            rabbitmqctl("delete_queue", "-p", vhost, reply_queue)
        finally:
            worker.signal(signal.SIGCONT)
        _, err = rerender.communicate(timeout=DEADLINE)

        assert rerender.returncode == 2, err
        message = err.decode().splitlines()[-1]
        assert message.startswith("rerender: error: the broker closed the run's channel")
        assert message.endswith("re-run with --resume to continue")
        partial = out.read_bytes()
        assert expected.startswith(partial) and partial != expected
        rabbitmqctl("set_vhost_limits", "-p", vhost, '{"max-queues": -1}')
        resumed = subprocess.run([*WORKER, *argv(run.source, out, "--resume", *broker)], cwd=REPO)
        assert resumed.returncode == 1  # the bad lines
        assert out.read_bytes() == expected


def test_a_job_above_the_size_limit_is_recorded_as_the_worker_answers_it_never_published(
    tmp_path: Path, topo: Topology, start_worker: StartWorker
) -> None:
    """Published, a job above the broker's own limit would close the run's channel and
    end the run on every resume; so no job above the worker's limit is published."""
    huge = {**json.loads(conformance_lines()[0])["job"], "job_id": "huge"}
    huge["padding"] = "x" * DEFAULT_MAX_MESSAGE_BYTES
    lines = [*conformance_lines()[:3], json.dumps(huge), *conformance_lines()[3:6]]
    source = write_lines(tmp_path / "in.jsonl", lines)
    expected = local_reference(source, tmp_path / "local.jsonl")
    wait_ready(start_worker())
    out, report = tmp_path / "broker.jsonl", tmp_path / "report.json"

    code = main(argv(source, out, "--report", str(report), *broker_args(topo)))

    assert code == 1  # the job above the limit is an error record
    assert out.read_bytes() == expected
    errors = [r["error"]["code"] for r in records(out) if r is not None and "error" in r]
    assert errors == ["payload_too_large"]
    assert json.loads(report.read_text())["broker"]["published"] == len(lines) - 1


def test_the_fleets_own_size_limit_is_kept_and_matches_the_local_engine(
    tmp_path: Path, topo: Topology, start_worker: StartWorker
) -> None:
    """With --max-message-bytes (a fleet configured below serve's default), the broker
    engine gates at that limit: the larger jobs are never published and their records
    are the local engine's with the same limit."""
    lines = conformance_lines()[:8]
    limit = "1000"
    source = write_lines(tmp_path / "in.jsonl", lines)
    local = tmp_path / "local.jsonl"
    assert main(argv(source, local, "--config", CONFIG, "--max-message-bytes", limit)) == 1
    too_large = sum(1 for r in records(local) if r and "error" in r)
    assert 0 < too_large < len(lines)
    wait_ready(start_worker())
    out, report = tmp_path / "broker.jsonl", tmp_path / "report.json"

    code = main(
        argv(source, out, "--report", str(report), "--max-message-bytes", limit) + broker_args(topo)
    )

    assert code == 1
    assert out.read_bytes() == local.read_bytes()
    broker = json.loads(report.read_text())["broker"]
    assert broker["published"] == len(lines) - too_large
    assert broker["max_message_bytes"] == int(limit)
