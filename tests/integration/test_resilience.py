"""No job is lost: worker crashes, restarts, shutdowns and broker outages.

Each test publishes many jobs through one `PromptClient` and checks that every single
one is answered in the end (the worker is at-least-once, so duplicates are allowed
and the client drops them).
"""

import asyncio
import contextlib
import os
import signal
from typing import Any

import pytest
from aio_pika.abc import AbstractChannel

from tests.integration.helpers import (
    StartWorker,
    TcpProxy,
    WorkerProcess,
    a_job,
    alive,
    children,
    close_connections_of,
    held_while_stopped,
    queue_depth,
    wait_for,
)
from worker.transport.link.topology import Topology
from worker.transport.producers.client import PromptClient

pytestmark = pytest.mark.broker

PREFETCH = 500


def start_calls(
    client: PromptClient, count: int, prefix: str, timeout: float = 240
) -> tuple[list[str], list[asyncio.Task[dict[str, Any]]]]:
    ids = [f"{prefix}-{i}" for i in range(count)]
    return ids, [asyncio.ensure_future(client.build(a_job(i), timeout=timeout)) for i in ids]


def answered(calls: list[asyncio.Task[dict[str, Any]]]) -> int:
    return sum(call.done() for call in calls)


async def at_least(calls: list[asyncio.Task[dict[str, Any]]], count: int) -> None:
    async def enough() -> bool:
        return answered(calls) >= count

    await wait_for(enough, 120, f"{count} replies")


async def all_answered(ids: list[str], calls: list[asyncio.Task[dict[str, Any]]]) -> None:
    replies = await asyncio.gather(*calls)
    assert sorted(r["job_id"] for r in replies) == sorted(ids)
    assert {r["status"] for r in replies} == {"ok"}


def redelivered(worker: WorkerProcess) -> set[str]:
    """The jobs `worker` was handed again after another worker had held them."""
    return {e["job_id"] for e in worker.job_lines() if e["attempt"] >= 1}


@pytest.mark.slow
async def test_sigkill_with_jobs_in_flight_then_restart_answers_every_job(
    start_worker: StartWorker, client: PromptClient
) -> None:
    worker = start_worker()
    await worker.wait_ready()
    ids, calls = start_calls(client, 2000, "kill")
    await at_least(calls, 100)

    helpers = children(worker.pid)
    assert helpers, "the worker should have started its render helper"
    # Frozen, the worker can settle nothing: what the broker counts as handed to it and
    # unsettled is exactly what the kill leaves unanswered or unacknowledged. Read in a
    # thread, so that this loop goes on publishing the calls meanwhile: on a slow
    # machine the worker may have answered all that was published so far when frozen.
    held = await asyncio.to_thread(held_while_stopped, worker.pid)
    worker.kill()
    assert held > 0, "the worker held no job at the kill: nothing tested"
    assert answered(calls) < len(ids), "every job was answered before the kill: nothing tested"

    restarted = start_worker()
    await all_answered(ids, calls)
    # Every job the killed worker held came back: at least as many as the broker counted
    # when it was frozen (its count lags what a blocked connection has taken).
    assert len(redelivered(restarted)) >= held
    # A held job whose reply had gone out before the kill was answered twice; the
    # client dropped the second reply. No other job can be.
    assert client.unmatched_replies <= held

    # The killed worker's render helper did not outlive it.
    async def helpers_gone() -> bool:
        return not any(alive(pid) for pid in helpers)

    await wait_for(helpers_gone, 30, "the render helper to die with its worker")


async def test_sigterm_finishes_in_flight_jobs_and_exits_0(
    start_worker: StartWorker, client: PromptClient, topo: Topology, channel: AbstractChannel
) -> None:
    # A prefetch window the worker takes a while to work through: a worker faster than
    # the broker can hand jobs out to would otherwise be idle between deliveries.
    worker = start_worker("--prefetch", str(PREFETCH))
    await worker.wait_ready()
    # Stopped while the calls are published, the worker has a backlog behind it when it
    # goes on, and so jobs in flight at SIGTERM, however fast it is against this client.
    # Every call is published first: a client still publishing reads replies late.
    os.kill(worker.pid, signal.SIGSTOP)
    ids, calls = start_calls(client, 2000, "term")

    async def backlog() -> bool:
        # All but those the broker sent the stopped worker (its prefetch).
        return await queue_depth(channel, topo.request_queue) >= len(ids) - PREFETCH

    try:
        await wait_for(backlog, 60, "a backlog of calls")
    finally:
        os.kill(worker.pid, signal.SIGCONT)
    await at_least(calls, 50)

    worker.signal(signal.SIGTERM)
    assert await worker.wait_exit() == 0

    events = worker.log_events()
    [stopping] = [e for e in events if e.get("event") == "stopping"]
    assert stopping["in_flight"] > 0, "no job was in flight at SIGTERM: nothing tested"
    # Everything the first worker took, it answered and acknowledged ...
    first = worker.job_lines()
    assert {e["settled"] for e in first} == {"acked"}

    successor = start_worker()
    await all_answered(ids, calls)
    # ... so no job was answered twice. (A quorum queue may still bump the delivery
    # count of a message it had assigned to the cancelled consumer but not yet sent;
    # such a message was never seen by the first worker.)
    assert client.unmatched_replies == 0
    answered_first = {e["job_id"] for e in first}
    assert not answered_first & {e["job_id"] for e in successor.job_lines()}


async def _stall_with_jobs_in_flight(
    start_worker: StartWorker, client: PromptClient, proxy: TcpProxy, *args: str
) -> tuple[WorkerProcess, list[str], list[asyncio.Task[dict[str, Any]]]]:
    """A worker whose broker link stalls (no bytes either way) while it has jobs in
    flight, then SIGTERM: it starts stopping with jobs it cannot finish. (Their records
    wait for confirms that cannot come either: at the default bound of 2 s a job stuck
    on its record alone would be acknowledged, into the stalled socket, and no longer in
    flight.)"""
    worker = start_worker(*args, "--archive-confirm-timeout", "600", amqp_url=proxy.url)
    await worker.wait_ready()
    ids, calls = start_calls(client, 1000, "stall")
    await at_least(calls, 50)

    # Nothing can be confirmed or acknowledged any more once the bytes already past the
    # proxy are read: from then on, jobs in flight are stuck there. Those bytes can
    # still settle what was in flight at the pause (confirms already in the worker's
    # socket), so the gauge must stay above zero after they are surely read. And the
    # stall can fall in an instant when the worker had settled everything it had been
    # handed, the next deliveries held in the proxy: then nothing is in flight, ever.
    # Such a stall is let go and tried again.
    async def in_flight() -> float:
        _, metrics = await worker.http_get("/metrics")
        gauge = next(
            line for line in metrics.splitlines() if line.startswith("prompt_worker_in_flight ")
        )
        return float(gauge.split()[1])

    async def stuck_in_flight() -> bool:
        if await in_flight() == 0:
            return False
        await asyncio.sleep(0.5)
        return await in_flight() > 0

    for _ in range(20):
        assert answered(calls) < len(calls), "every job answered before the stall"
        proxy.pause()
        with contextlib.suppress(AssertionError):
            await wait_for(stuck_in_flight, 2, "jobs in flight behind the stalled link")
            break
        proxy.resume()
        await asyncio.sleep(0.02)
    else:
        raise AssertionError("no stall of the link caught the worker with jobs in flight")
    worker.signal(signal.SIGTERM)

    async def stopping() -> bool:
        return any(e.get("event") == "stopping" for e in worker.log_events())

    await wait_for(stopping, 30, "the worker to start stopping")
    [event] = [e for e in worker.log_events() if e.get("event") == "stopping"]
    assert event["in_flight"] > 0, "no job was in flight at SIGTERM: nothing tested"
    return worker, ids, calls


async def test_a_second_signal_exits_at_once_and_nothing_is_lost(
    start_worker: StartWorker, client: PromptClient
) -> None:
    proxy = TcpProxy()
    await proxy.start()
    try:
        worker, ids, calls = await _stall_with_jobs_in_flight(start_worker, client, proxy)
        worker.signal(signal.SIGTERM)
        assert await worker.wait_exit(within=10) == 128 + signal.SIGTERM
        proxy.resume()  # the broker learns the connection is gone and requeues its jobs
        start_worker()
        await all_answered(ids, calls)
    finally:
        await proxy.stop()


async def test_shutdown_gives_up_waiting_after_the_timeout_and_nothing_is_lost(
    start_worker: StartWorker, client: PromptClient
) -> None:
    proxy = TcpProxy()
    await proxy.start()
    try:
        worker, ids, calls = await _stall_with_jobs_in_flight(
            start_worker, client, proxy, "--shutdown-timeout", "1"
        )
        assert await worker.wait_exit(within=60) == 0
        assert any(e.get("event") == "shutdown_timeout" for e in worker.log_events())
        proxy.resume()
        start_worker()
        await all_answered(ids, calls)
    finally:
        await proxy.stop()


@pytest.mark.slow
async def test_connection_closed_by_the_broker_mid_run(
    start_worker: StartWorker, client: PromptClient
) -> None:
    # Like `rabbitmqctl close_all_connections "test"`, but only this worker's
    # connection: other users of the shared broker keep theirs.
    worker = start_worker()
    await worker.wait_ready()
    # Enough jobs that the close (rabbitmqctl takes a while) lands mid-run.
    ids, calls = start_calls(client, 5000, "closed")
    await at_least(calls, 100)

    assert close_connections_of(worker.pid) == 1
    # aio-pika reconnects at once when the last attempt is older than the interval,
    # so the not-ready window can be milliseconds here: the outage test below holds
    # the broker away long enough to watch /readyz; this one checks the log.
    await all_answered(ids, calls)

    def worker_events() -> list[str]:
        return [e["event"] for e in worker.log_events() if e.get("component") == "worker"]

    async def reconnected() -> bool:
        return "broker_reconnected" in worker_events()

    # Jobs answered before the close landed need no reconnect: wait for it as such.
    await wait_for(reconnected, 30, "the worker to log its reconnect")
    events = worker_events()
    assert events.index("broker_link_down") < events.index("broker_reconnected")
    _, metrics = await worker.http_get("/metrics")
    assert "prompt_worker_reconnects_total 1.0" in metrics
    assert "prompt_worker_ready 1.0" in metrics


@pytest.mark.slow
async def test_broker_outage_mid_run(start_worker: StartWorker, client: PromptClient) -> None:
    proxy = TcpProxy()
    await proxy.start()
    try:
        worker = start_worker(amqp_url=proxy.url + "?reconnect_interval=1")
        await worker.wait_ready()
        ids, calls = start_calls(client, 1500, "outage")
        await at_least(calls, 100)

        await proxy.stop()

        async def not_ready() -> bool:
            return await worker.readyz() == 503

        await wait_for(not_ready, 30, "/readyz to report not ready")
        # Down for a few reconnect attempts, not just one.
        await asyncio.sleep(3)
        assert await worker.readyz() == 503
        _, metrics = await worker.http_get("/metrics")
        assert "prompt_worker_ready 0.0" in metrics

        await proxy.start()
        await worker.wait_ready()
        await all_answered(ids, calls)
    finally:
        await proxy.stop()


async def test_worker_started_before_the_broker_serves_once_it_appears(
    start_worker: StartWorker, client: PromptClient
) -> None:
    proxy = TcpProxy()  # not listening yet: the "broker" is down
    worker = start_worker(amqp_url=proxy.url + "?reconnect_interval=1")
    try:
        await worker.wait_alive()
        await asyncio.sleep(1.5)
        assert worker.process.poll() is None
        assert await worker.readyz() == 503

        await proxy.start()
        await worker.wait_ready()
        reply = await client.build(a_job("late-broker"), timeout=60)
        assert reply["status"] == "ok"
    finally:
        await proxy.stop()


async def test_sigterm_while_the_broker_is_unreachable_exits_0(start_worker: StartWorker) -> None:
    proxy = TcpProxy()
    worker = start_worker(amqp_url=proxy.url)

    await worker.wait_alive()
    worker.signal(signal.SIGTERM)
    assert await worker.wait_exit() == 0


async def test_the_client_rides_out_its_own_connection_loss(
    start_worker: StartWorker, topo: Topology
) -> None:
    worker = start_worker()
    await worker.wait_ready()
    proxy = TcpProxy()
    await proxy.start()
    try:
        async with PromptClient(proxy.url, request_queue=topo.request_queue) as client:
            ids, calls = start_calls(client, 1000, "client-drop", timeout=120)
            await at_least(calls, 50)
            await proxy.stop()  # replies sent now find no reply queue
            await asyncio.sleep(1.5)
            await proxy.start()
            await all_answered(ids, calls)
            assert client.resent > 0
    finally:
        await proxy.stop()
