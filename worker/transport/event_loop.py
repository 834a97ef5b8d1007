"""The event loop `serve` runs on: uvloop where it is installed, else asyncio's own.

uvloop (libuv underneath, the loop and its transports written in C) takes less CPU per
message than asyncio's pure-Python selector loop: the worker's per-job work is mostly
event-loop and socket bookkeeping around a short render (docs/PERFORMANCE.md, "The
transport's hot path"). Nothing in the worker depends on which loop runs it; `asyncio`
stays selectable (`--event-loop asyncio`) as the reference and for platforms without
uvloop wheels.
"""

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from worker.transport.settings import EventLoopName

T = TypeVar("T")
LoopFactory = Callable[[], asyncio.AbstractEventLoop]


class EventLoopUnavailable(RuntimeError):
    """The loop asked for by name cannot be used here."""


def loop_factory(choice: EventLoopName) -> LoopFactory | None:
    """The factory of the loop `choice` names, for `asyncio.Runner`: None for asyncio's own.

    "auto" takes uvloop when it can be imported; "uvloop" insists on it. Resolved before
    the supervisor starts any process, so a missing uvloop is one start-up error.
    """
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise EventLoopUnavailable(
                "--event-loop uvloop: uvloop is not installed (pip install uvloop), "
                "or choose auto or asyncio"
            ) from None
        return None
    return uvloop.new_event_loop


def running_loop_name() -> str:
    """The name of the loop this coroutine runs on (uvloop or asyncio), for the log."""
    module = type(asyncio.get_running_loop()).__module__
    return "uvloop" if module.split(".")[0] == "uvloop" else "asyncio"


def run_on(factory: LoopFactory | None, main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)`, on the loop `factory` makes (asyncio's own when None)."""
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
