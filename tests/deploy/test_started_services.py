"""scripts/started-services, with which scripts/test stops what it started: the Docker
engine and the RabbitMQ 4.0 node it found stopped and started, never one that was
already running. Stand-ins play the engine (a process, a pid file and a `docker` that
answers while it lives) and the node (a listening port, a recording node script)."""

import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.data import REPO

SCRIPT = REPO / "scripts" / "started-services"
FAKE_DOCKER = """#!/usr/bin/env bash
kill -0 "$(cat "$DOCKER_PIDFILE" 2>/dev/null)" 2>/dev/null
"""
RECORDER = """#!/usr/bin/env bash
echo "RABBIT_NODE_VERSION=$RABBIT_NODE_VERSION $*" >> "$CALLS"
"""


class Stage:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        for name, text in (("docker", FAKE_DOCKER), ("rabbit-node", RECORDER)):
            (bin_dir / name).write_text(text)
            (bin_dir / name).chmod(0o755)
        self.calls = tmp_path / "calls"
        self.calls.touch()
        self.pidfile = tmp_path / "docker.pid"
        self.note_file = tmp_path / "note"
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.env = {
            **os.environ,
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "DOCKER_PIDFILE": str(self.pidfile),
            "RABBIT4_PORT": str(self.port),
            "RABBIT_NODE": str(bin_dir / "rabbit-node"),
            "CALLS": str(self.calls),
        }
        self.engine: int | None = None
        self.node: socket.socket | None = None

    def start_engine(self) -> None:
        """A process that is not this one's child, as dockerd is not the script's: its
        end is reaped by init, so `kill -0` stops finding it."""
        subprocess.run(
            ["sh", "-c", f"sleep 300 >/dev/null 2>&1 & echo $! > {self.pidfile}"],
            check=True,
            timeout=30,
        )
        self.engine = int(self.pidfile.read_text())

    def engine_alive(self) -> bool:
        assert self.engine is not None
        try:
            os.kill(self.engine, 0)
        except ProcessLookupError:
            return False
        return True

    def start_node(self) -> None:
        self.node = socket.socket()
        self.node.bind(("127.0.0.1", self.port))
        self.node.listen()

    def run(self, action: str) -> None:
        subprocess.run(
            [str(SCRIPT), action, str(self.note_file)], env=self.env, check=True, timeout=120
        )

    def close(self) -> None:
        if self.engine is not None and self.engine_alive():
            os.kill(self.engine, signal.SIGKILL)
        if self.node is not None:
            self.node.close()


@pytest.fixture
def stage(tmp_path: Path) -> Iterator[Stage]:
    staged = Stage(tmp_path)
    yield staged
    staged.close()


def test_what_the_run_started_is_stopped(stage: Stage) -> None:
    stage.run("note")
    stage.start_engine()
    stage.start_node()
    stage.run("stop")
    assert not stage.engine_alive()  # the script waits for it to end
    assert stage.calls.read_text() == "RABBIT_NODE_VERSION=4.0 stop rabbit4\n"


def test_what_ran_before_the_run_is_left_running(stage: Stage) -> None:
    stage.start_engine()
    stage.start_node()
    stage.run("note")
    stage.run("stop")
    assert stage.engine_alive()
    assert stage.calls.read_text() == ""


def test_nothing_started_nothing_stopped(stage: Stage) -> None:
    stage.run("note")
    stage.run("stop")
    assert stage.calls.read_text() == ""
