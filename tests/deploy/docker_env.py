"""The Docker engine for the image, stack and manifest tests: built images and containers.

The images are built by the repository's scripts (scripts/build-image on the
Debian-built stand-in base, scripts/build-standins for RabbitMQ and Prometheus), which
Docker's layer cache and the stand-ins' recipe labels make quick when nothing changed.
Without an engine the tests skip on a workstation and fail under CI=true, where
scripts/test has started one (scripts/ensure-docker).
"""

import contextlib
import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.unavailable import missing

REPO = Path(__file__).resolve().parents[2]
IMAGE = os.environ.get("PROMPT_WORKER_IMAGE", "build-prompt-worker:dev")
# Every container the tests start carries it, so a leftover can be found by label.
TEST_LABEL = "org.prompt-worker.test"
# Bounds for hangs on a shared machine; they time nothing.
BUILD_TIMEOUT = 1200
COMMAND_TIMEOUT = 120


def docker(*args: str, timeout: float = COMMAND_TIMEOUT, check: bool = True) -> str:
    """Run `docker ARGS`; its stdout. A failure raises with docker's own stderr."""
    result = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"docker {' '.join(args)} exited {result.returncode}:\n{result.stderr}"
        )
    return result.stdout


def engine_answers() -> bool:
    try:
        docker("version", "--format", "{{.Server.Version}}", timeout=30)
    except (AssertionError, OSError, subprocess.TimeoutExpired):
        return False
    return True


def require_engine() -> None:
    """Skip where no Docker engine answers, except in CI, where that is a failure."""
    if not engine_answers():
        missing("a Docker engine", "scripts/ensure-docker installs and starts one")


def run_script(name: str, *args: str) -> None:
    result = subprocess.run(
        [str(REPO / "scripts" / name), *args],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, f"scripts/{name} failed:\n{result.stdout}{result.stderr}"


def built_image() -> str:
    """The worker image built from this tree (on the stand-in base); its tag."""
    require_engine()
    run_script("build-image", IMAGE)
    return IMAGE


def image_config(image: str) -> dict[str, Any]:
    [inspected] = json.loads(docker("image", "inspect", image))
    config: dict[str, Any] = inspected["Config"]
    return config


def unique_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@dataclass
class Container:
    """A container started by a test; `remove()` is safe to call more than once."""

    name: str

    def inspect(self) -> dict[str, Any]:
        [inspected] = json.loads(docker("container", "inspect", self.name))
        result: dict[str, Any] = inspected
        return result

    def state(self) -> dict[str, Any]:
        state: dict[str, Any] = self.inspect()["State"]
        return state

    def logs(self) -> str:
        result = subprocess.run(
            ["docker", "logs", self.name],
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
            check=False,
        )
        return result.stdout + result.stderr

    def log_events(self) -> list[dict[str, Any]]:
        events = []
        for line in self.logs().splitlines():
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if isinstance(event, dict):
                    events.append(event)
        return events

    def exec(self, *command: str) -> str:
        return docker("exec", self.name, *command)

    def kill(self, signal: str) -> None:
        docker("kill", "--signal", signal, self.name)

    def wait_exit(self, within: float) -> int:
        return int(docker("wait", self.name, timeout=within).strip())

    def wait_health(self, status: str, within: float) -> None:
        deadline = time.monotonic() + within
        while True:
            state = self.state()
            current = state.get("Health", {}).get("Status")
            if current == status:
                return
            if not state["Running"]:
                raise AssertionError(f"{self.name} exited:\n{self.logs()[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{self.name} is {current!r}, not {status!r}, after {within} s"
                )
            time.sleep(0.5)

    def remove(self) -> None:
        docker("rm", "--force", "--volumes", self.name, check=False)


@contextlib.contextmanager
def running(
    image: str, *run_args: str, command: Sequence[str] = (), prefix: str = "pw-test"
) -> Iterator[Container]:
    """`docker run --detach` the image; the container is removed afterwards, whatever happens."""
    container = Container(unique_name(prefix))
    try:
        docker(
            "run",
            "--detach",
            "--name",
            container.name,
            "--label",
            TEST_LABEL,
            *run_args,
            image,
            *command,
        )
        yield container
    finally:
        container.remove()
