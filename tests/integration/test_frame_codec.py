"""The fast frame codec is what encodes and decodes a job's frames in a real `serve` run.

The worker runs as a subprocess on the real broker, started through the CLI as a user
starts it, with spies around the codec's functions (the fast ones, and the pamqp ones it
hands a frame to when it has no fast path for it). At exit it writes which frame types
each one saw; a job's delivery, reply, acknowledgement and publisher confirm must all
be the fast codec's, none pamqp's.
"""

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.integration.helpers import (
    AMQP_URL,
    CASES,
    CONFORMANCE_CONFIG,
    REPO,
    WorkerProcess,
    free_port,
    serve_env,
)
from worker.transport.link.topology import Topology
from worker.transport.producers.client import PromptClient

pytestmark = pytest.mark.broker

# Wraps the codec's functions before serve chooses its codec (the link calls the
# module's `marshal` and `unmarshal`, which call the module's PAMQP_* for frames without
# a fast path), then runs serve; at exit, the frame types each saw go to the file named
# first, with whether pamqp's own functions are still pamqp's. Only calls once the codec
# is chosen count: the choice's self-check calls both codecs itself.
SPIED_SERVE = """
import atexit, collections, json, sys
import pamqp.frame
from worker.transport.link import codec, frames

seen = {name: collections.Counter() for name in ("fast_out", "fast_in", "pamqp_out", "pamqp_in")}
chosen = []

def spy_out(name, function):
    def spy(value, channel):
        if chosen:
            seen[name][type(value).__name__] += 1
        return function(value, channel)
    return spy

def spy_in(name, function):
    def spy(data):
        result = function(data)
        if chosen:
            seen[name][type(result[2]).__name__] += 1
        return result
    return spy

def choose(choice, choose=codec.choose):
    result = choose(choice)
    chosen.append(result.name)
    return result

frames.marshal = spy_out("fast_out", frames.marshal)
frames.unmarshal = spy_in("fast_in", frames.unmarshal)
frames.PAMQP_MARSHAL = spy_out("pamqp_out", frames.PAMQP_MARSHAL)
frames.PAMQP_UNMARSHAL = spy_in("pamqp_in", frames.PAMQP_UNMARSHAL)
codec.choose = choose
out = sys.argv.pop(1)
def report():
    untouched = [f.__module__ for f in (pamqp.frame.marshal, pamqp.frame.unmarshal)]
    open(out, "w").write(json.dumps({**seen, "chosen": chosen, "pamqp_frame": untouched}))
atexit.register(report)
from worker.cli import main
raise SystemExit(main(["serve"]))
"""

# The frames of one job, by type, as pamqp names them.
JOB_IN = {"Deliver", "ContentHeader", "ContentBody", "Ack"}  # Ack: the reply's confirm
JOB_OUT = {"Publish", "ContentHeader", "ContentBody", "Ack"}  # Ack: the job's settlement


def start_spied_worker(topo: Topology, seen_path: Path, log_path: Path) -> WorkerProcess:
    port = free_port()
    env = {
        **os.environ,
        **serve_env(topo, port, AMQP_URL),
        "PROMPT_WORKER_CONFIG": str(CONFORMANCE_CONFIG),
        "PROMPT_WORKER_AMQP_CODEC": "fast",
    }
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-c", SPIED_SERVE, str(seen_path)],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    return WorkerProcess(process, port, log_path, env)


async def test_the_fast_codec_encodes_and_decodes_every_frame_of_a_job(
    topo: Topology, tmp_path: Path
) -> None:
    seen_path = tmp_path / "seen.json"
    worker = start_spied_worker(topo, seen_path, tmp_path / "worker.log")
    try:
        await worker.wait_ready()
        [starting] = [e for e in worker.log_events() if e.get("event") == "starting"]
        assert starting["amqp_codec"] == "fast"
        jobs = [case["job"] for case in CASES[:3]]
        async with PromptClient(AMQP_URL, request_queue=topo.request_queue) as client:
            replies = await asyncio.gather(*(client.build(job, timeout=60) for job in jobs))
        assert [reply["status"] for reply in replies] == ["ok"] * len(jobs)
    finally:
        worker.signal(signal.SIGTERM)
    assert await worker.wait_exit() == 0, worker.logs()[-3000:]

    report = json.loads(seen_path.read_text())
    assert report.pop("chosen") == ["fast"]
    # pamqp's module functions are its own: the link calls the codec it was given.
    assert report.pop("pamqp_frame") == ["pamqp.frame", "pamqp.frame"]
    seen = {name: Counter(counts) for name, counts in report.items()}
    # Every frame of the jobs went through the fast codec ...
    assert seen["fast_in"].keys() >= JOB_IN, seen
    assert seen["fast_out"].keys() >= JOB_OUT, seen
    assert seen["fast_in"]["Deliver"] >= len(jobs)
    assert seen["fast_out"]["Publish"] >= len(jobs)
    # ... and none of them was handed on to pamqp (which still writes and reads the
    # rest: the handshake, declarations, the consumer's registration).
    assert not JOB_IN & seen["pamqp_in"].keys(), seen
    assert not JOB_OUT & seen["pamqp_out"].keys(), seen
    assert seen["pamqp_out"]["Declare"] >= 1
