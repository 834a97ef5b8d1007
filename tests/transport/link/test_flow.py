"""`BrokerFlow`: deliveries wait while the broker blocks the connection, and only the
latest connection's `connection.blocked` / `unblocked` count. How those frames are
read from the broker's bytes is tested with the connection (tests/transport/link/amqp)."""

import asyncio

import structlog

from worker.transport.link.flow import BrokerFlow


class Changes:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def a_flow(changes: Changes) -> BrokerFlow:
    return BrokerFlow(structlog.get_logger(), changes)


async def test_deliveries_wait_while_blocked_and_pass_when_unblocked() -> None:
    changes = Changes()
    flow = a_flow(changes)
    on_blocked, on_unblocked = flow.watch()
    await flow.admit()  # not blocked: at once
    on_blocked("low on memory")
    assert flow.blocked and flow.reason == "low on memory"
    waiting = [asyncio.ensure_future(flow.admit()) for _ in range(3)]
    await asyncio.sleep(0.01)
    assert not any(w.done() for w in waiting)
    assert flow.waiting == 3
    on_unblocked()
    await asyncio.wait_for(asyncio.gather(*waiting), timeout=1)
    assert not flow.blocked and flow.waiting == 0
    assert changes.count == 2


async def test_a_second_blocked_frame_keeps_the_block_and_takes_its_reason() -> None:
    changes = Changes()
    flow = a_flow(changes)
    on_blocked, _ = flow.watch()
    on_blocked("low on memory")
    on_blocked("low on disk")
    assert flow.blocked and flow.reason == "low on disk"
    assert changes.count == 1


async def test_frames_of_a_replaced_connection_change_nothing() -> None:
    changes = Changes()
    flow = a_flow(changes)
    old_blocked, _ = flow.watch()
    _, new_unblocked = flow.watch()  # a new connection
    old_blocked("low on memory")
    assert not flow.blocked and changes.count == 0
    new_unblocked()  # unblocked while not blocked: nothing changes
    assert changes.count == 0


async def test_a_lost_connection_releases_the_held_deliveries() -> None:
    flow = a_flow(Changes())
    on_blocked, _ = flow.watch()
    on_blocked("low on disk")
    waiting = asyncio.ensure_future(flow.admit())
    await asyncio.sleep(0)
    flow.release("connection lost")
    await asyncio.wait_for(waiting, timeout=1)
    assert not flow.blocked
