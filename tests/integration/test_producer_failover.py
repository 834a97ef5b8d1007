"""The producers over a 3-node cluster: the node a `PromptClient` and a `rerender --broker`
run are connected to is killed (`kill -9`) in the middle of their work; both move to
another node and every call and every job is answered.

The cluster is `scripts/rabbit-cluster` (extra nodes beside the system broker, on free
ports of the run's own). The producers are given every node,
the victim first, so they start on it. The queues are declared, and the worker
connected, through a node that survives: what is tried here is the producers' side
(their link, their reply queue, their re-sends), not a queue leader's election.

RabbitMQ (3.10, and 4.0 on Mnesia, its default store) removes the queues of a node that
died on every surviving node, each in two steps: it lists the names of the dead node's
queues, then deletes the records of those names, in transactions of their own. A reply
queue declared again under the same name on a survivor between one node's deletion and
another's loses its record to the later one, while its consumer goes on: every reply
from then on is unroutable. The second test deletes the old name's record as that later
step does, at a moment of its choosing.
"""

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import aio_pika
import pytest

from tests.aio_pika_topology import declare_topology
from tests.data import CONFORMANCE, REPO
from tests.integration.helpers import StartWorker, WorkerProcess, a_job, new_topology, wait_for
from tests.rabbit_nodes import NODE_VERSION, ExtraCluster
from tests.rerender.files import conformance_lines, write_lines
from worker.cli import main
from worker.transport.link.broker_failures import broker_address
from worker.transport.link.topology import Topology
from worker.transport.producers.client import PromptClient

pytestmark = [pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(900)]

CALLS = 3000
# The worker is stopped once this many calls are answered, and the node killed while it
# is: mid-run, with calls and jobs surely in flight.
KILL_AFTER = 100
DEADLINE = 300.0


# The extra nodes' names (the `cluster` fixture).
CLUSTER_LABEL = "producers"


@pytest.fixture
def topo() -> Topology:
    """Unique names on the cluster (`cluster`, tests/integration/conftest.py); its nodes'
    state is discarded with it."""
    return new_topology("producers")


def rerender_run(tmp_path: Path, broker: str, request_queue: str) -> "subprocess.Popen[bytes]":
    """`rerender --broker` over 40 copies of the conformance cases, in a subprocess."""
    source = write_lines(tmp_path / "in.jsonl", conformance_lines() * 40)
    local = tmp_path / "local.jsonl"
    config = str(CONFORMANCE / "worker.yaml")
    assert main(["rerender", str(source), "--out", str(local), "--config", config]) == 0
    argv = ["rerender", str(source), "--out", str(tmp_path / "broker.jsonl"), "--progress", "off"]
    options = ["--report", str(tmp_path / "report.json"), f"--broker={broker}"]
    options += ["--request-queue", request_queue, "--window", "64", "--timeout", "120"]
    return subprocess.Popen(
        [sys.executable, "-m", "worker", *argv, *options],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def written(tmp_path: Path) -> int:
    out = tmp_path / "broker.jsonl"
    return out.read_bytes().count(b"\n") if out.exists() else 0


async def worker_beside_the_victim(
    cluster: ExtraCluster, start_worker: StartWorker, topo: Topology
) -> tuple[WorkerProcess, str]:
    """The queues declared and a worker ready through the survivors; and the producers'
    URL: every node, the victim (the first) first, so that they start on it."""
    victim, survivor, third = cluster.urls
    setup = await aio_pika.connect(survivor)
    async with setup:
        await declare_topology(await setup.channel(), topo)
    worker = start_worker(amqp_url=f"{survivor},{third}")
    await worker.wait_ready()
    return worker, f"{victim}?reconnect_interval=0.2,{survivor},{third}"


async def test_a_client_and_a_rerender_run_lose_their_node_and_finish(
    cluster: ExtraCluster, start_worker: StartWorker, topo: Topology, tmp_path: Path
) -> None:
    victim, survivor, third = cluster.urls
    worker, producers_url = await worker_beside_the_victim(cluster, start_worker, topo)

    run = rerender_run(tmp_path, producers_url, topo.request_queue)

    async def run_started() -> bool:
        return written(tmp_path) > 0

    # The calls start once the run is answered: a run slow to start would otherwise let
    # every call be answered before the node is killed.
    await wait_for(run_started, 120, "the run's first records")
    async with PromptClient(producers_url, request_queue=topo.request_queue) as client:
        assert client.broker == broker_address(victim)
        ids = [f"producers-{i}" for i in range(CALLS)]
        calls = [asyncio.ensure_future(client.build(a_job(i), timeout=DEADLINE)) for i in ids]

        async def mid_run() -> bool:
            return sum(c.done() for c in calls) >= KILL_AFTER

        await wait_for(mid_run, 120, f"{KILL_AFTER} replies")
        worker.signal(signal.SIGSTOP)
        try:
            assert run.poll() is None, "the run ended before its node was killed"
            assert sum(c.done() for c in calls) < CALLS, "every call answered before the kill"
            cluster.nodes[0].kill()

            async def moved() -> bool:
                return client.broker in (broker_address(survivor), broker_address(third))

            await wait_for(moved, 60, "the client to reconnect through another node")
        finally:
            worker.signal(signal.SIGCONT)

        replies = await asyncio.gather(*calls)
        assert sorted(r["job_id"] for r in replies) == sorted(ids)
        assert {r["status"] for r in replies} == {"ok"}
        # The calls out when the node went were published again through another node.
        assert client.resent > 0

    deadline = time.monotonic() + DEADLINE
    while run.poll() is None:
        assert time.monotonic() < deadline, "the rerender run did not finish"
        await asyncio.sleep(0.2)
    _, err = run.communicate()
    assert run.returncode == 0, err
    expected = (tmp_path / "local.jsonl").read_bytes()
    assert (tmp_path / "broker.jsonl").read_bytes() == expected
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["broker"]["timeouts"] == 0
    assert report["broker"]["reconnects"] >= 1


# What RabbitMQ's on_node_down does, on each node, for each queue name it listed as the
# dead node's: the record of that name goes, whatever queue holds the name by then. 3.10:
# rabbit_amqqueue:delete_queue/1; 4.0 on Mnesia (its default store):
# rabbit_db_queue:delete_transient_in_mnesia_tx/1, ten names a transaction.
LATE_CLEANUP = """
Name = rabbit_misc:r(<<"/">>, queue, <<"{name}">>),
{transaction}(fun () ->
    ok = mnesia:delete({{rabbit_queue, Name}}),
    {bindings}(Name)
end),
ok.
"""
# Where each version keeps the transaction and the removal of the name's bindings.
LATE_CLEANUP_FUNCTIONS = {
    "3.10": {
        "transaction": "rabbit_misc:execute_mnesia_transaction",
        "bindings": "rabbit_binding:remove_transient_for_destination",
    },
    "4.0": {
        "transaction": "rabbit_mnesia:execute_mnesia_transaction",
        "bindings": "rabbit_db_binding:delete_transient_for_destination_in_mnesia",
    },
}


async def test_a_late_clean_up_of_the_dead_nodes_reply_queue_costs_no_call(
    cluster: ExtraCluster, start_worker: StartWorker, topo: Topology
) -> None:
    """The client loses its node; once it is answered again through a survivor, the third
    node removes the dead node's reply queue by its name, late. The calls made after
    that are answered all the same."""
    victim, survivor, _ = cluster.urls
    _, producers_url = await worker_beside_the_victim(cluster, start_worker, topo)

    async with PromptClient(producers_url, request_queue=topo.request_queue) as client:
        assert client.broker == broker_address(victim)
        assert (await client.build(a_job("on-the-victim"), timeout=60))["status"] == "ok"
        on_the_dead_node = client.reply_queue
        cluster.nodes[0].kill()

        async def moved() -> bool:
            return client.broker == broker_address(survivor)

        await wait_for(moved, 60, "the client to reconnect through the survivor")
        # Answered: the client consumes its reply queue on the survivor again.
        assert (await client.build(a_job("moved"), timeout=60))["status"] == "ok"

        cleanup = LATE_CLEANUP.format(name=on_the_dead_node, **LATE_CLEANUP_FUNCTIONS[NODE_VERSION])
        cluster.nodes[2].ctl("eval", cleanup)

        ids = [f"after-clean-up-{i}" for i in range(20)]
        # The timeout bounds a hang: without the fix these replies are unroutable.
        replies = await asyncio.gather(*(client.build(a_job(i), timeout=60) for i in ids))
        assert sorted(r["job_id"] for r in replies) == sorted(ids)
        assert {r["status"] for r in replies} == {"ok"}
