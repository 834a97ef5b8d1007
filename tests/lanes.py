"""Lanes: the full suite as pytest processes side by side (scripts/test).

Most of the broker suites' time is waiting (for a node to restart, a heartbeat to
lapse, a queue leader to move), so `scripts/test` runs `tests/integration` and
`tests/deploy` in one process and everything else, then the RabbitMQ 4.0 run, in
another. A process says which part of the suite it runs (`PROMPT_WORKER_TEST_LANE`:
`integration` or `rest`; unset, every test it is given) and takes its own part of the
ports the tests hand out (`PROMPT_WORKER_TEST_PORTS`: `k/n`, the k-th of n parts;
unset, all of them), so that no two pick the same port for a worker, a proxy or an
extra RabbitMQ node.
"""

import os
from pathlib import Path

LANE_ENV = "PROMPT_WORKER_TEST_LANE"
PORTS_ENV = "PROMPT_WORKER_TEST_PORTS"
# Lane `integration`'s directories: the broker suites, and the deployment's (Docker).
INTEGRATION = tuple(Path(__file__).resolve().parent / name for name in ("integration", "deploy"))
LANES = ("integration", "rest")


def lane() -> str | None:
    """This process's lane, None for every test; a misspelt lane is an error."""
    name = os.environ.get(LANE_ENV) or None
    if name is not None and name not in LANES:
        raise ValueError(f"{LANE_ENV}={name!r}: expected one of {', '.join(LANES)}")
    return name


def in_lane(path: Path, name: str | None) -> bool:
    """Whether the test file at `path` runs in lane `name`."""
    if name is None:
        return True
    inside = any(path.resolve().is_relative_to(directory) for directory in INTEGRATION)
    return inside == (name == "integration")


def port_share(ports: range) -> range:
    """This process's share of `ports`: the part its lane was given (`k/n`: the k-th of
    n equal parts), else all of them."""
    share = os.environ.get(PORTS_ENV) or None
    if share is None:
        return ports
    part, _, parts = share.partition("/")
    if not (part.isdigit() and parts.isdigit() and 1 <= int(part) <= int(parts)):
        raise ValueError(f"{PORTS_ENV}={share!r}: expected k/n, e.g. 1/3")
    size = len(ports) // int(parts)
    first = ports.start + (int(part) - 1) * size
    return range(first, first + size)
