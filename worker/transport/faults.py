"""Fault injection for the test suite: never enabled in production.

The worker's answers to a render that never ends and to a bug in its own handling can
only be tested end to end if a job can be made to cause them on purpose. With
`PROMPT_WORKER_TEST_FAULTS=1` in the worker's environment (only tests set it; no
deployment in `deploy/` does, and docs/OPERATIONS.md says never to), a job whose body
contains one of the markers below misbehaves where the transport renders it, on the
event loop or in the render helper alike:

* `SLOW_RENDER`: the render computes for an hour (a busy loop), as a pathological job
  would;
* `HANDLER_BUG`: the render path raises, as a bug outside the renderer's own guard would.

Without the variable the markers are ordinary text and this module costs one boolean
test per job.
"""

import os
import time
from collections.abc import Mapping

ENV = "PROMPT_WORKER_TEST_FAULTS"
SLOW_RENDER = b"test-fault:slow-render"
HANDLER_BUG = b"test-fault:handler-bug"


class InjectedFault(RuntimeError):
    """The failure a `HANDLER_BUG` job asked for."""


def enabled(environ: Mapping[str, str] = os.environ) -> bool:
    return environ.get(ENV) == "1"


def inject(body: bytes) -> None:
    """Misbehave as `body` asks (called only when `enabled()`)."""
    if SLOW_RENDER in body:
        until = time.monotonic() + 3600
        while time.monotonic() < until:
            pass
    if HANDLER_BUG in body:
        raise InjectedFault("injected handler bug")
