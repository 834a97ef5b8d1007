"""`BrokerFlow`: aiormq's blocked / unblocked frames, as its log lines bring them."""

import asyncio
import logging
from typing import Any

import structlog

from worker.transport.flow import BrokerFlow

AIORMQ = logging.getLogger("aiormq.connection")


class Changes:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def a_flow(ours: Any, changes: Changes) -> BrokerFlow:
    return BrokerFlow(structlog.get_logger(), lambda connection: connection is ours, changes)


async def test_deliveries_wait_while_blocked_and_pass_when_unblocked() -> None:
    ours, changes = object(), Changes()
    flow = a_flow(ours, changes)
    await flow.admit()  # not blocked: at once
    AIORMQ.warning("Connection %r was blocked by: %r", ours, "low on memory")
    assert flow.blocked and flow.reason == "low on memory"
    waiting = [asyncio.ensure_future(flow.admit()) for _ in range(3)]
    await asyncio.sleep(0.01)
    assert not any(w.done() for w in waiting)
    assert flow.waiting == 3
    AIORMQ.warning("Connection %r was unblocked", ours)
    await asyncio.wait_for(asyncio.gather(*waiting), timeout=1)
    assert not flow.blocked and flow.waiting == 0
    assert changes.count == 2


async def test_frames_of_another_connection_change_nothing() -> None:
    ours, changes = object(), Changes()
    flow = a_flow(ours, changes)
    AIORMQ.warning("Connection %r was blocked by: %r", object(), "low on memory")
    assert not flow.blocked and changes.count == 0


async def test_the_frames_are_seen_after_aiormq_is_quieted() -> None:
    """Quieting the library afterwards (a higher log level, or a one-shot command's
    silence_broker_libraries in the same process) must not hide the frames."""
    ours, changes = object(), Changes()
    flow = a_flow(ours, changes)
    library = logging.getLogger("aiormq")
    level = library.level
    library.setLevel(logging.CRITICAL)
    try:
        AIORMQ.warning("Connection %r was blocked by: %r", ours, "low on memory")
        assert flow.blocked
        AIORMQ.warning("Connection %r was unblocked", ours)
        assert not flow.blocked
    finally:
        library.setLevel(level)


async def test_a_lost_connection_releases_the_held_deliveries() -> None:
    ours, changes = object(), Changes()
    flow = a_flow(ours, changes)
    AIORMQ.warning("Connection %r was blocked by: %r", ours, "low on disk")
    waiting = asyncio.ensure_future(flow.admit())
    await asyncio.sleep(0)
    flow.release("connection lost")
    await asyncio.wait_for(waiting, timeout=1)
    assert not flow.blocked


def test_the_library_lines_are_taken_over(caplog: Any) -> None:
    ours = object()
    a_flow(ours, Changes())
    with caplog.at_level(logging.WARNING, logger="aiormq.connection"):
        AIORMQ.warning("Connection %r was blocked by: %r", ours, "low on memory")
        AIORMQ.warning("Connection %r was unblocked", ours)
        AIORMQ.warning("something else")
    assert [r.getMessage() for r in caplog.records] == ["something else"]
