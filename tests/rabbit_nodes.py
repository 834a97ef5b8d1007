"""Extra RabbitMQ nodes for tests that must break a broker.

Restarts, alarms, clusters and TLS listeners are tried on nodes of their own, started by
`scripts/rabbit-node` beside the system broker, which the rest of the suite shares and
which must never be disturbed.

Nothing about a node is a constant, so two suites on one machine never step on each
other: its name (and so its state directory and its registration with epmd) carries
this process's id and a random part, and its ports are found free when it is made.

RABBIT_NODE_VERSION (3.10, the default, or 4.0) says which RabbitMQ the extra nodes
run: 4.0 is the trixie root of scripts/ensure-rabbitmq4. scripts/test sets it, with
PROMPT_WORKER_TEST_AMQP_URL and PROMPT_WORKER_TEST_BROKER_NODE, for its run of the
integration suites against RabbitMQ 4.0.
"""

from __future__ import annotations

import os
import random
import secrets
import shutil
import socket
import subprocess
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from tests.lanes import port_share
from tests.unavailable import missing

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "rabbit-node"
NODE_VERSION = os.environ.get("RABBIT_NODE_VERSION", "3.10")
ROOT4 = Path(os.environ.get("RABBIT4_ROOT", "/var/lib/prompt-worker/trixie-rabbitmq"))


def node_tools_missing() -> str | None:
    """Why extra nodes cannot run here, or None when they can."""
    if NODE_VERSION == "4.0":
        if not (ROOT4 / ".prompt-worker-complete").exists():
            return f"no RabbitMQ 4.0 root at {ROOT4} (scripts/ensure-rabbitmq4 builds it)"
        if os.geteuid() != 0:
            return "RabbitMQ 4.0 nodes run in a chroot: run the tests as root"
        return None
    if not Path("/usr/lib/rabbitmq/bin/rabbitmq-server").exists():
        return "RabbitMQ's server scripts are not installed (scripts/ensure-rabbitmq)"
    if os.geteuid() != 0 and shutil.which("runuser") is None:
        return "extra nodes run as the rabbitmq user: run the tests as root"
    return None


def require_node_tools() -> None:
    """Skip where extra nodes cannot run; under CI a missing tool is a failure."""
    reason = node_tools_missing()
    if reason is not None:
        missing("what extra RabbitMQ nodes need", reason)


# scripts/rabbit-node puts a node's Erlang distribution on its AMQP port + 20000. Both
# stay below Linux's ephemeral range (32768-60999), where the OS picks the ports of
# outgoing connections, and clear of the system broker (5672, 25672), of the fixed
# ports some tools default to (8080 for the worker's HTTP, 9090, 9190 for the stack),
# and of the ports the integration helpers hand out for HTTP (10000-15000). A stream's
# replicas listen on 16000-16999 (scripts/rabbit-node sets osiris' range).
DIST_OFFSET = 20000
_PORTS = port_share(range(5800, 8000))  # a lane's half (tests/lanes.py)
_handed_out: set[int] = set()


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count: int = 1) -> int:
    """The first of `count` consecutive ports that nobody listens on, nor on their
    distribution ports (+20000); never handed out twice in one test run."""
    while True:
        first = random.choice(_PORTS[: len(_PORTS) - count])
        wanted = {first + i for i in range(count)}
        wanted |= {port + DIST_OFFSET for port in wanted}
        if wanted & _handed_out:
            continue
        if all(_bindable(port) for port in wanted):
            _handed_out.update(wanted)
            return first


def run_name(label: str) -> str:
    """A node name of this run: `label`, this process's id and a random part."""
    return f"{label}-{os.getpid()}-{secrets.token_hex(3)}"


class ExtraNode:
    """One RabbitMQ node on 127.0.0.1:`port` (by default a free one), named after `label`
    and this run; stopped on exit and its state directory removed."""

    def __init__(
        self,
        label: str,
        port: int | None = None,
        *,
        conf: str = "",
        plugins: Sequence[str] = (),
        fresh: bool = False,
        name: str | None = None,
    ) -> None:
        # `name`: a node of a cluster, named by scripts/rabbit-cluster.
        self.name = name or run_name(label)
        self.port = port if port is not None else free_ports()
        self.conf = conf
        self.plugins = tuple(plugins)
        self.fresh = fresh
        self.nodename = f"{name}@localhost"

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    @property
    def state_dir(self) -> Path:
        return Path(self._run("dir", self.name).stdout.strip())

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, RABBIT_NODE_PLUGINS=",".join(self.plugins))
        if self.fresh:
            env["RABBIT_NODE_FRESH"] = "1"
        result = subprocess.run(
            [str(SCRIPT), *args], env=env, capture_output=True, text=True, check=False
        )
        if check and result.returncode != 0:
            raise RuntimeError(
                f"scripts/rabbit-node {' '.join(args)} failed ({result.returncode}):\n"
                f"{result.stdout}{result.stderr}"
            )
        return result

    def start(self) -> ExtraNode:
        conf_file = Path(f"/tmp/prompt-worker-node-{self.name}.conf")
        conf_file.write_text(self.conf)
        try:
            self._run("start", self.name, str(self.port), str(conf_file))
        finally:
            conf_file.unlink(missing_ok=True)
        return self

    def stop(self) -> None:
        self._run("stop", self.name, check=False)

    def kill(self) -> None:
        """SIGKILL the node's Erlang VM, as a crashed host would go."""
        self._run("kill", self.name)

    def ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self._run("ctl", self.name, *args, check=check)

    def queues(self, *args: str) -> subprocess.CompletedProcess[str]:
        """rabbitmq-queues against this node."""
        return self._run("queues", self.name, *args)

    def stop_app(self) -> None:
        self.ctl("stop_app")

    def start_app(self) -> None:
        self.ctl("start_app")
        self.ctl("await_startup")

    def __enter__(self) -> ExtraNode:
        require_node_tools()
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
        # Named for this run alone: nothing will ever start from this state again.
        shutil.rmtree(self.state_dir, ignore_errors=True)


CLUSTER_SCRIPT = SCRIPT.parent / "rabbit-cluster"


class ExtraCluster:
    """Three clustered nodes on 127.0.0.1:`port`..`port`+2 (free ports, a name of this
    run), from `scripts/rabbit-cluster`: started from empty state on entry, always
    stopped on exit (a node a test killed too) and their state removed."""

    def __init__(self, label: str = "cluster") -> None:
        self.name = run_name(label)
        self.port = free_ports(3)
        self.nodes = [ExtraNode(label, self.port + i, name=f"{self.name}{i + 1}") for i in range(3)]

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.nodes]

    @property
    def amqp_url(self) -> str:
        """The setting's value for this cluster: every node's URL, comma-separated."""
        return self._run("urls").stdout.strip()

    def _run(self, command: str) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, RABBIT_CLUSTER_NAME=self.name, RABBIT_CLUSTER_PORT=str(self.port))
        result = subprocess.run(
            [str(CLUSTER_SCRIPT), command], env=env, capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"scripts/rabbit-cluster {command} failed ({result.returncode}):\n"
                f"{result.stdout}{result.stderr}"
            )
        return result

    def node_on(self, port: int) -> ExtraNode:
        [node] = [node for node in self.nodes if node.port == port]
        return node

    def __enter__(self) -> ExtraCluster:
        require_node_tools()
        try:
            self._run("up")
        except BaseException:
            self._run("down")
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._run("down")
        for node in self.nodes:
            shutil.rmtree(node.state_dir, ignore_errors=True)
