"""The compose stack brought up for real: RabbitMQ, two workers and Prometheus.

deploy/docker-compose.yml with deploy/docker-compose.standins.yml, which swaps in images
built from Debian's packages (scripts/build-standins; the public registries are out of
reach here) and leaves out Grafana, which has none. The worker is the image
scripts/build-image builds from this tree. The stack runs under a project name of its
own on its own bridge network, with its ports published on 127.0.0.1 away from the
machine's broker (deploy/standins.env); `docker-compose down -v` removes it, also when a
test fails. The dashboard is checked against the exported metric names offline
(test_metrics.py).
"""

import asyncio
import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.data import CONFORMANCE, read_jsonl
from tests.deploy.docker_env import (
    BUILD_TIMEOUT,
    COMMAND_TIMEOUT,
    IMAGE,
    REPO,
    built_image,
    docker,
    run_script,
    unique_name,
)
from tests.integration.helpers import free_port
from worker.render.config import load_config
from worker.render.renderer import Renderer
from worker.transport.producers.client import PromptClient

# A cold first build of the images (minutes) happens in the fixtures when not done before.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

DEPLOY = REPO / "deploy"
COMPOSE_FILES = [DEPLOY / "docker-compose.yml", DEPLOY / "docker-compose.standins.yml"]
ENV_FILE = DEPLOY / "standins.env"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
# The stack's broker user (deploy/rabbitmq/compose/10-users.json), development only.
STACK_USER = "prompt-worker:prompt-worker"
CASES = [*read_jsonl(CONFORMANCE / "cases.jsonl"), *read_jsonl(CONFORMANCE / "families.jsonl")]
# Bounds for hangs on a shared machine; they time nothing. Prometheus scrapes every 15 s.
UP_TIMEOUT = 240.0
SCRAPE_TIMEOUT = 120.0


def env_file() -> dict[str, str]:
    pairs = (
        line.split("=", 1)
        for line in ENV_FILE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    )
    return {name: value for name, value in pairs}


@dataclass
class Stack:
    project: str
    env: dict[str, str]

    def compose(self, *args: str, timeout: float = BUILD_TIMEOUT) -> str:
        files = [item for path in COMPOSE_FILES for item in ("-f", str(path))]
        result = subprocess.run(
            ["docker-compose", *files, "--env-file", str(ENV_FILE), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        assert result.returncode == 0, f"docker-compose {args} failed:\n{result.stderr}"
        return result.stdout

    def port(self, name: str) -> int:
        """A published port: the environment's value, else deploy/standins.env's."""
        return int(self.env.get(name) or env_file()[name])

    @property
    def amqp_url(self) -> str:
        return f"amqp://{STACK_USER}@127.0.0.1:{self.port('STACK_AMQP_PORT')}/"

    def prometheus(self, path: str) -> Any:
        url = f"http://127.0.0.1:{self.port('STACK_PROMETHEUS_PORT')}{path}"
        with urllib.request.urlopen(url, timeout=10) as response:
            body: dict[str, Any] = json.load(response)
        assert body["status"] == "success", body
        return body["data"]

    def containers(self, service: str) -> list[str]:
        return self.compose("ps", "-q", service, timeout=COMMAND_TIMEOUT).split()

    def left_behind(self) -> dict[str, list[str]]:
        label = f"label=com.docker.compose.project={self.project}"
        return {
            "containers": docker("ps", "-a", "-q", "--filter", label).split(),
            "networks": docker("network", "ls", "-q", "--filter", label).split(),
            "volumes": docker("volume", "ls", "-q", "--filter", label).split(),
        }


def wait_until(condition: Any, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except (OSError, AssertionError, KeyError, ValueError) as exc:
            last = exc
        time.sleep(1)
    raise AssertionError(f"timed out after {within} s waiting for {what} (last: {last!r})")


def worker_get(container: str, path: str) -> str:
    """GET a path of a worker replica's HTTP server from inside its container (the
    replicas publish no port: two cannot share one)."""
    probe = (
        "import sys, urllib.request; "
        f"sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:8080{path}', timeout=5)"
        ".read().decode())"
    )
    return docker("exec", container, "python", "-c", probe)


def ok_jobs(metrics_text: str) -> float:
    return sum(
        sample.value
        for family in text_string_to_metric_families(metrics_text)
        for sample in family.samples
        if sample.name == "prompt_worker_jobs_total" and sample.labels["status"] == "ok"
    )


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    built_image()
    run_script("build-standins", "rabbitmq", "prometheus")
    project = unique_name("pw-stack-test")
    # The environment's STACK_*_PORT values win over the env file's, as in compose. The
    # test's stack publishes on ports found free now: the env file's fixed ones may be
    # held by a stand-in stack a developer left up, or by anything else on the machine.
    ports = {
        name: str(free_port())
        for name in env_file()
        if name.startswith("STACK_") and name.endswith("_PORT") and name not in os.environ
    }
    the_stack = Stack(project, {**os.environ, **ports, "COMPOSE_PROJECT_NAME": project})

    def both_ready() -> bool:
        workers = the_stack.containers("worker")
        for container in workers:
            worker_get(container, "/readyz")  # raises until it answers 200
        return len(workers) == 2

    try:
        the_stack.compose("up", "-d", "--no-build")
        wait_until(both_ready, UP_TIMEOUT, "both workers ready")
        yield the_stack
    finally:
        the_stack.compose("down", "-v", "--remove-orphans", timeout=COMMAND_TIMEOUT * 3)


def test_the_stack_runs_two_workers_from_the_image(stack: Stack) -> None:
    workers = stack.containers("worker")
    assert len(workers) == 2
    for container in workers:
        [inspected] = json.loads(docker("container", "inspect", container))
        assert inspected["Config"]["Image"] == IMAGE
        assert inspected["State"]["Running"]


def test_jobs_through_the_stacks_broker_are_answered_by_both_workers(stack: Stack) -> None:
    workers = stack.containers("worker")
    before = {c: ok_jobs(worker_get(c, "/metrics")) for c in workers}

    async def send_all() -> list[dict[str, Any]]:
        async with PromptClient(stack.amqp_url) as client:
            return await asyncio.gather(*(client.build(case["job"], timeout=60) for case in CASES))

    replies = asyncio.run(send_all())
    # The stack's workers run with deploy/worker.yaml (no MCP registry), not the
    # conformance configuration: the reference is this tree's renderer with that file
    # (test_image.py checks the image against the conformance expectations themselves).
    renderer = Renderer(load_config(DEPLOY / "worker.yaml"))
    for case, reply in zip(CASES, replies, strict=True):
        assert reply["status"] == "ok", reply
        expected = orjson.loads(renderer.render(orjson.dumps(case["job"])).body)
        # Everything but the render time, which is measured anew each time.
        del reply["meta"]["render_ms"], expected["meta"]["render_ms"]
        assert reply == expected, case["job"]["job_id"]

    answered = {c: ok_jobs(worker_get(c, "/metrics")) - before[c] for c in workers}
    # The broker spreads the jobs over both consumers: each answered some, none twice.
    assert all(count > 0 for count in answered.values()), answered
    assert sum(answered.values()) == len(CASES)


def test_prometheus_scrapes_both_workers_and_loads_the_alert_rules(stack: Stack) -> None:
    def workers_up() -> bool:
        targets = stack.prometheus("/api/v1/targets")["activeTargets"]
        health = [t["health"] for t in targets if t["labels"]["job"] == "prompt-worker"]
        return health == ["up", "up"]

    wait_until(workers_up, SCRAPE_TIMEOUT, "both worker targets up")

    groups = stack.prometheus("/api/v1/rules")["groups"]
    loaded = {rule["name"] for group in groups for rule in group["rules"]}
    defined = {
        rule["alert"]
        for group in yaml.safe_load(ALERTS.read_text(encoding="utf-8"))["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }
    assert defined and loaded == defined


def test_down_leaves_nothing_behind(stack: Stack) -> None:
    assert any(stack.left_behind().values())
    stack.compose("down", "-v", "--remove-orphans", timeout=COMMAND_TIMEOUT * 3)
    assert stack.left_behind() == {"containers": [], "networks": [], "volumes": []}


def test_the_override_swaps_in_stand_ins_and_leaves_out_grafana() -> None:
    override = yaml.safe_load(COMPOSE_FILES[1].read_text(encoding="utf-8"))["services"]
    assert override["grafana"]["profiles"] == ["grafana"]
    assert override["worker"]["build"]["args"]["PYTHON_IMAGE"] == "local/python:3.11-bookworm"
    built_by = (REPO / "scripts" / "build-standins").read_text(encoding="utf-8")
    for service in ("rabbitmq", "prometheus"):
        assert f"[{service}]={override[service]['image']}" in built_by
