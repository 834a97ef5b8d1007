"""What a test does when something it needs is not there: the suite's one skip policy.

On a developer's machine a test that needs the broker or a tool (promtool, hadolint,
rabbitmqctl, Chromium, libhyperscan) skips when it is missing, saying how to get it.
Under `CI=true` it FAILS instead: `scripts/test` starts the broker and installs every
tool, so anything missing there is a broken set-up, and a test must not vanish from
CI without anyone noticing. Every skip of the suite goes through here, so the policy
is stated once (tests/test_unavailable.py runs it both ways).

* `missing(what, how)`: call it in a test or fixture;
* `tool(name, how, env=...)`: the path of a command, else `missing`;
* the `broker` marker: `pytest_runtest_setup` (imported by tests/conftest.py) checks
  that the broker answers before each test carrying it;
* `@needs(available, what, how)`: the same for any other condition.

Nothing in the suite reads outside the clone: reference material is copied in
(tests/reference-copies.sha256, scripts/check-reference-copies).
"""

import os
import shutil
import socket
import sys
from collections.abc import Callable
from typing import NoReturn
from urllib.parse import urlsplit

import pytest

IN_CI = os.environ.get("CI") == "true"
AMQP_URL = os.environ.get("PROMPT_WORKER_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")


def missing(what: str, how: str) -> NoReturn:
    """Skip the test, or under CI=true fail it: `what` is missing, `how` gets it."""
    message = f"{what} is missing: {how}"
    if IN_CI:
        pytest.fail(f"{message} (CI=true: tests fail rather than skip for want of it)", False)
    pytest.skip(message)


def tool(name: str, how: str, env: str | None = None) -> str:
    """The command `name`: from `$env` if set, else the virtualenv's bin, else PATH."""
    if env and os.environ.get(env):
        return os.environ[env]
    venv_bin = os.path.dirname(sys.executable)
    found = shutil.which(name, path=f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}")
    if found is None:
        missing(name, how)
    return found


def broker_reachable(url: str = AMQP_URL) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 5672), 2):
            return True
    except OSError:
        return False


def needs(available: Callable[[], bool], what: str, how: str) -> pytest.MarkDecorator:
    """Mark a test as needing `available()` to be true (checked when it is set up)."""
    return pytest.mark.needs(available, what, how)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """The hook tests/conftest.py installs: the `broker` and `needs` markers."""
    if item.get_closest_marker("broker") is not None and not broker_reachable():
        missing(f"RabbitMQ at {AMQP_URL}", "scripts/ensure-rabbitmq installs and starts it")
    for mark in item.iter_markers("needs"):
        available, what, how = mark.args
        if not available():
            missing(what, how)
