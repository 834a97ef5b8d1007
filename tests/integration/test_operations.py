"""What operators see and rely on: topology, probes, metrics, logs, processes, client."""

import asyncio
import gc
import io
import json
import os
import signal
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import aio_pika
import orjson
import pytest
from aio_pika.abc import AbstractChannel

from tests.aio_pika_topology import declare_topology
from tests.integration.helpers import (
    AMQP_URL,
    BASE_CASE,
    StartWorker,
    a_job,
    alive,
    archive_stream,
    children,
    drain,
    held_while_stopped,
    wait_for,
)
from worker.ops.logs import configure_logging
from worker.ops.metrics import METRIC_NAMES, Metrics
from worker.render.config import load_config
from worker.render.renderer import Renderer
from worker.transport.consumer.worker import Worker
from worker.transport.link import topology as topology_module
from worker.transport.link.topology import Topology
from worker.transport.processes.offload import RenderPool
from worker.transport.producers.client import PromptClient, PromptClientError, PromptTimeout
from worker.transport.settings import Settings

pytestmark = pytest.mark.broker

CONFORMANCE_CONFIG = Path(__file__).resolve().parents[1] / "conformance" / "worker.yaml"


# -- topology ----------------------------------------------------------------------


async def test_declared_topology_matches_the_module(
    start_worker: StartWorker, topo: Topology, channel: AbstractChannel
) -> None:
    worker = start_worker()
    await worker.wait_ready()
    # Re-declaring with other arguments would fail with 406 and close the channel, so
    # a second declaration succeeding proves the broker holds exactly these arguments.
    declared = await declare_topology(channel, topo)
    assert declared.request_queue.arguments == topology_module.request_queue_arguments(
        topo.dead_letter, 5
    )
    # ... and the dead-letter exchange really routes to the dead-letter queue.
    await channel.default_exchange.publish(
        aio_pika.Message(b"probe"), routing_key=topo.dead_letter_queue
    )
    await declared.dead_letter_exchange.publish(aio_pika.Message(b"via-dlx"), routing_key="x")
    bodies = {m.body for m in await drain(channel, topo.dead_letter_queue, 2)}
    assert bodies == {b"probe", b"via-dlx"}


async def test_a_conflicting_existing_queue_is_a_clear_exit_2(
    start_worker: StartWorker, topo: Topology, channel: AbstractChannel
) -> None:
    await channel.declare_queue(topo.request_queue, durable=True)  # classic, no arguments
    worker = start_worker()
    assert await worker.wait_exit() == 2
    [conflict] = [e for e in worker.log_events() if e.get("event") == "topology_conflict"]
    assert "PRECONDITION_FAILED" in conflict["error"]


async def test_a_supervisor_whose_workers_hit_a_conflict_exits_2(
    start_worker: StartWorker, topo: Topology, channel: AbstractChannel
) -> None:
    await channel.declare_queue(topo.request_queue, durable=True)  # classic, no arguments
    supervisor = start_worker("--processes", "2")
    # Not restarted in a loop: a configuration error would only repeat.
    assert await supervisor.wait_exit() == 2
    assert any(e.get("event") == "worker_config_error" for e in supervisor.log_events())


# -- probes and metrics --------------------------------------------------------------


async def test_probes_and_every_metric_family_are_exposed(
    start_worker: StartWorker, client: PromptClient, topo: Topology
) -> None:
    worker = start_worker()
    await worker.wait_ready()
    assert (await worker.http_get("/healthz"))[0] == 200
    status, body = await worker.http_get("/readyz")
    assert status == 200
    assert json.loads(body) == {
        "ready": True,
        "connected": True,
        "consuming": True,
        "accepting": True,
        "unblocked": True,
        "replies_accepted": True,
        # A note that never makes the worker unready (docs/ARCHIVE.md).
        "archive": {
            "stream": archive_stream(topo),
            "connected": True,
            "recording": True,
            "last_problem": None,
            "lost": {},
        },
    }
    masked_job = a_job("masked", alert_data="password: hunter2-not-a-real-one\n")
    assert (await client.build(masked_job, timeout=60))["status"] == "ok"
    assert (await client.build_bytes(b"nope", timeout=60))["error"]["code"] == "invalid_json"

    metrics = await worker.metrics_showing(
        'prompt_worker_jobs_total{code="",kind="react",status="ok"} 1.0',
        'prompt_worker_jobs_total{code="invalid_json",kind="unknown",status="error"} 1.0',
        'prompt_worker_job_seconds_count{kind="react"} 1.0',
        'prompt_worker_prompt_chars_count{kind="react"} 1.0',
        "prompt_worker_request_bytes_count 2.0",
        "prompt_worker_in_flight 0.0",
        "prompt_worker_ready 1.0",
    )
    declared = {line.split()[2] for line in metrics.splitlines() if line.startswith("# TYPE ")}
    assert set(METRIC_NAMES) <= declared
    assert 'prompt_worker_build_info{version="' in metrics


def test_metric_names_are_the_dashboard_contract() -> None:
    registry_names = set()
    for family in Metrics("test").registry.collect():
        suffix = "_total" if family.type == "counter" else ""
        registry_names.add(family.name + suffix)
    assert registry_names == set(METRIC_NAMES)


# -- logs ---------------------------------------------------------------------------


async def test_logs_never_hold_payload_text_at_info_level(
    start_worker: StartWorker, client: PromptClient
) -> None:
    canary = f"CANARY-{uuid.uuid4().hex}"
    worker = start_worker()
    await worker.wait_ready()
    await _send_canaries(client, canary)
    worker.signal(signal.SIGTERM)
    assert await worker.wait_exit() == 0

    logs = worker.logs()
    assert canary not in logs
    jobs = [e for e in worker.log_events() if e.get("event") == "job"]
    assert len(jobs) == 4
    for line in jobs:
        assert {
            "job_id",
            "kind",
            "status",
            "code",
            "request_bytes",
            "prompt_chars",
            "duration_ms",
        } <= line.keys()
    assert "request" not in jobs[0]


async def test_debug_level_does_log_payloads(
    start_worker: StartWorker, client: PromptClient
) -> None:
    # The counterpart of the test above: proves the canary would be seen if logged.
    canary = f"CANARY-{uuid.uuid4().hex}"
    worker = start_worker(env={"PROMPT_WORKER_LOG_LEVEL": "debug"})
    await worker.wait_ready()
    await _send_canaries(client, canary)
    await worker.logged_jobs(4)
    assert canary in worker.logs()


async def _send_canaries(client: PromptClient, canary: str) -> None:
    ok = await client.build(
        a_job("canary-ok", alert_data=canary, runbook_content=canary), timeout=60
    )
    assert ok["status"] == "ok"
    assert canary in json.dumps(ok["messages"])
    invalid = {"job_id": "canary-bad", "kind": "react", "session": {"alert_data": [canary]}}
    assert (await client.build(invalid, timeout=60))["error"]["code"] == "invalid_job"
    broken = f'{{"job_id": "{canary}", "session": "{canary}'.encode()
    assert (await client.build_bytes(broken, timeout=60))["error"]["code"] == "invalid_json"
    unknown_kind = {"job_id": "canary-kind", "kind": canary}
    reply = await client.build(unknown_kind, timeout=60)
    assert reply["error"]["code"] == "invalid_job"


# -- internal errors (in-process worker, real broker) -----------------------------------


def in_process_settings(topo: Topology) -> Settings:
    """An in-process worker's settings: the test's queues, no HTTP server."""
    return Settings(
        amqp_url=AMQP_URL,
        request_queue=topo.request_queue,
        reply_queue=topo.reply_queue,
        dead_letter_queue=topo.dead_letter,
        http_port=0,
        archive_stream=archive_stream(topo),
    )


class _ExplodingContributors:
    def apply(self, job: Any, messages: Any) -> Any:
        raise KeyError(f"secret-{job.job_id}")


async def test_an_exception_while_rendering_is_an_internal_error_reply_and_dead_letter(
    topo: Topology, client: PromptClient, channel: AbstractChannel
) -> None:
    stream = io.StringIO()
    configure_logging("info", "json", stream)
    settings = in_process_settings(topo)
    renderer = Renderer(load_config(CONFORMANCE_CONFIG))
    renderer.contributors = _ExplodingContributors()  # type: ignore[assignment]
    worker = Worker(settings, renderer, Metrics("test"))
    running = asyncio.create_task(worker.run())
    try:

        async def ready() -> bool:
            return worker.ready

        await wait_for(ready, 60, "in-process worker ready")
        job = a_job("explodes")
        reply = await client.build(job, timeout=60)
        assert reply["status"] == "error"
        assert reply["error"]["code"] == "internal"
        assert reply["job_id"] == "explodes"
        [dead] = await drain(channel, topo.dead_letter_queue, 1)
        assert orjson.loads(dead.body) == job
        # Still serving.
        assert (await client.build_bytes(b"[]", timeout=60))["status"] == "error"
    finally:
        worker.request_stop()
        assert await asyncio.wait_for(running, 60) == 0

    [line] = [json.loads(x) for x in stream.getvalue().splitlines() if '"job_id":"explodes"' in x]
    assert line["level"] == "error"
    assert line["code"] == "internal"
    assert "Traceback" in line["exception"]
    assert "KeyError" in line["exception"]
    assert "apply" in line["exception"]
    # The exception's message quotes job data: withheld below debug level.
    assert "secret-explodes" not in stream.getvalue()


class _HeldHelper(RenderPool):
    """A render pool whose helper's start-up lasts until the test lets it finish."""

    def __init__(self, config: Any) -> None:
        super().__init__(config, 1 << 20)
        self.finish = asyncio.Event()
        self.warmed = False

    async def warm_up(self) -> bool:
        await self.finish.wait()
        self.warmed = True
        return True


async def test_the_consumer_starts_once_the_render_helper_has_started(topo: Topology) -> None:
    """The helper's start-up (about a second of a core) never lands on the first jobs."""
    settings = in_process_settings(topo)
    renderer = Renderer(load_config(CONFORMANCE_CONFIG))
    pool = _HeldHelper(renderer.config)
    worker = Worker(settings, renderer, Metrics("test"), render_pool=pool)
    connection = await aio_pika.connect(AMQP_URL)
    running = asyncio.create_task(worker.run())

    async def consumers() -> int | None:
        """The request queue's consumers; None while it is not declared."""
        async with connection.channel() as channel:
            try:
                declared = await channel.declare_queue(topo.request_queue, passive=True)
            except aio_pika.exceptions.ChannelClosed:
                return None
            return int(declared.declaration_result.consumer_count or 0)

    async def declared() -> bool:
        return await consumers() is not None

    async def consuming() -> bool:
        return await consumers() == 1

    try:
        await wait_for(declared, 60, "the worker's topology")
        # Declared, and the consumer waits for the helper.
        with pytest.raises(AssertionError, match="timed out"):
            await wait_for(consuming, 3, "a consumer while the helper starts")
        assert not worker.ready
        pool.finish.set()
        await wait_for(consuming, 60, "the consumer")
        assert pool.warmed
    finally:
        pool.finish.set()
        worker.request_stop()
        assert await asyncio.wait_for(running, 60) == 0
        await connection.close()


# -- big jobs ------------------------------------------------------------------------


async def test_big_jobs_render_in_the_helper_process_while_small_ones_flow(
    start_worker: StartWorker, client: PromptClient
) -> None:
    worker = start_worker("--offload-bytes", "100000")
    await worker.wait_ready()
    big = a_job("big", alert_data="line of alert text\n" * 60_000)
    smalls = [client.build(a_job(f"small-{i}"), timeout=120) for i in range(50)]
    replies = await asyncio.gather(client.build(big, timeout=120), *smalls)
    assert {r["status"] for r in replies} == {"ok"}
    assert len(replies[0]["messages"][1]["content"]) > 1_000_000

    # A reply can reach the client before the worker has the confirm, and with it
    # writes the job's line.
    lines = {e["job_id"]: e for e in await worker.logged_jobs(51)}
    assert lines["big"]["offloaded"] is True
    assert lines["small-0"]["offloaded"] is False


# -- scale-out -------------------------------------------------------------------------


@pytest.mark.slow
async def test_processes_compete_are_restarted_and_stop_together(
    start_worker: StartWorker, client: PromptClient
) -> None:
    supervisor = start_worker("--processes", "2")
    ports = (supervisor.http_port, supervisor.http_port + 1)
    for port in ports:
        await supervisor.wait_ready(port=port)
    first = children(supervisor.pid)
    assert len(first) == 2

    # A backlog, so that each process has a full prefetch window when one is killed.
    ids = [f"scale-{i}" for i in range(3000)]
    calls = [asyncio.ensure_future(client.build(a_job(i), timeout=240)) for i in ids]

    async def both_serving() -> bool:
        served = Counter(e["pid"] for e in supervisor.log_events() if e.get("event") == "job")
        return set(served) == set(first) and min(served.values()) >= 50

    # Past the first burst: each process has answered jobs and works from the backlog.
    await wait_for(both_serving, 120, "both processes to take jobs from the queue")

    victim, survivor = first
    victim_helpers = children(victim)
    assert victim_helpers, "each worker process has its render helper"
    # The kill must land while the victim holds unsettled jobs; between two of its
    # batched acks it can hold none for a moment, so it is let run on and frozen again.
    # The survivor is frozen too meanwhile, or it could answer the whole backlog while
    # the victim's count is read.
    for _ in range(5):
        os.kill(survivor, signal.SIGSTOP)
        held = await asyncio.to_thread(held_while_stopped, victim, 6.0)
        if held:
            break
        os.kill(victim, signal.SIGCONT)
        os.kill(survivor, signal.SIGCONT)
        await asyncio.sleep(0.5)
    os.kill(victim, signal.SIGKILL)
    os.kill(survivor, signal.SIGCONT)
    assert held > 0, "the killed process held no job: nothing tested"
    assert not all(call.done() for call in calls), "every job was answered: nothing tested"

    async def replaced() -> bool:
        now = children(supervisor.pid)
        return len(now) == 2 and victim not in now

    await wait_for(replaced, 60, "the killed worker to be replaced")
    for port in ports:
        await supervisor.wait_ready(port=port)
    replies = await asyncio.gather(*calls)
    assert sorted(r["job_id"] for r in replies) == sorted(ids)
    assert {r["status"] for r in replies} == {"ok"}
    # Every job the killed process held was handed out again (to the survivor or the
    # replacement): at least as many as the broker had counted when it was frozen (its
    # count lags what a blocked connection has taken). One it had answered but not
    # acknowledged was answered twice, and the client dropped the second reply.
    again = {
        e["job_id"]
        for e in supervisor.log_events()
        if e.get("event") == "job" and e["pid"] != victim and e["attempt"] >= 1
    }
    assert len(again) >= held
    assert client.unmatched_replies <= held
    assert (await client.build(a_job("after-restart"), timeout=60))["status"] == "ok"

    survivors = children(supervisor.pid)
    survivors += [helper for pid in survivors for helper in children(pid)] + victim_helpers
    supervisor.signal(signal.SIGTERM)
    assert await supervisor.wait_exit() == 0

    async def all_gone() -> bool:
        return not any(alive(pid) for pid in survivors)

    await wait_for(all_gone, 30, "workers and render helpers to exit with their supervisor")


# -- client -----------------------------------------------------------------------------


async def test_client_times_out_clearly_when_no_worker_consumes(
    topo: Topology, client: PromptClient, channel: AbstractChannel
) -> None:
    await declare_topology(channel, topo)
    with pytest.raises(PromptTimeout) as raised:
        await client.build(a_job("nobody-home"), timeout=0.5)
    assert isinstance(raised.value, TimeoutError)
    assert "nobody-home" in str(raised.value)
    assert topo.request_queue in str(raised.value)


async def test_a_resend_that_fails_after_its_call_timed_out_reports_nothing(
    topo: Topology, client: PromptClient, channel: AbstractChannel, monkeypatch: pytest.MonkeyPatch
) -> None:
    await declare_topology(channel, topo)
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: reported.append(context))
    call = asyncio.ensure_future(client.build(a_job("late-resend"), timeout=0.5))

    async def published() -> bool:
        return bool(client._pending)

    await wait_for(published, 10, "the call to be published")
    # A reconnect re-sends the waiting call; the re-send hangs until the call has timed
    # out, then fails.
    release = asyncio.Event()

    async def publish_fails_late(body: bytes, correlation_id: str) -> None:
        await release.wait()
        raise PromptClientError("link down")

    monkeypatch.setattr(client, "_publish", publish_fails_late)
    client._resend_pending()
    resends = client._resending
    assert resends is not None
    with pytest.raises(PromptTimeout):
        await call
    release.set()
    await asyncio.gather(resends)
    del call
    gc.collect()
    await asyncio.sleep(0)
    loop.set_exception_handler(None)
    assert reported == []


async def test_client_refuses_to_publish_into_a_missing_queue(topo: Topology) -> None:
    async with PromptClient(AMQP_URL, request_queue=f"{topo.request_queue}.missing") as c:
        with pytest.raises(PromptClientError, match="does not exist"):
            await c.build(BASE_CASE["job"], timeout=5)
