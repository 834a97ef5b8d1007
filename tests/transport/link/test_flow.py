"""`BrokerFlow`: deliveries wait while the broker blocks the connection, and only the
latest connection's blocks count. The connections here stand in for aiormq's with the
one method the flow calls (`ready()`, which waits while the broker blocks); that aiormq's
`ready()` follows the broker's `connection.blocked` / `unblocked` is tested against a
scripted broker (test_broker_link.py) and a real alarm (tests/integration)."""

import asyncio
from typing import Any, cast

import pytest
import structlog
from aiormq.abc import AbstractConnection

from worker.transport.link import flow as flow_module
from worker.transport.link.flow import BLOCKED_REASON, BrokerFlow


class Changes:
    def __init__(self) -> None:
        self.count = 0
        self.changed = asyncio.Event()

    def __call__(self) -> None:
        self.count += 1
        self.changed.set()

    async def until(self, count: int) -> None:
        async with asyncio.timeout(5):
            while self.count < count:
                self.changed.clear()
                await self.changed.wait()


class Blockable:
    """`ready()` and `is_closed`, as aiormq's connection has them."""

    def __init__(self) -> None:
        self.unblocked = asyncio.Event()
        self.unblocked.set()
        self.is_closed = False

    async def ready(self) -> None:
        await self.unblocked.wait()


def a_flow(changes: Changes) -> BrokerFlow:
    return BrokerFlow(structlog.get_logger(), changes)


def watched(flow: BrokerFlow, connection: Blockable) -> "asyncio.Task[None]":
    return flow.watch(cast(AbstractConnection, cast(Any, connection)))


@pytest.fixture(autouse=True)
def quick_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flow_module, "CHECK_EVERY", 0.01)
    monkeypatch.setattr(flow_module, "READY_WITHIN", 0.01)


async def test_deliveries_wait_while_blocked_and_pass_when_unblocked() -> None:
    changes = Changes()
    flow = a_flow(changes)
    connection = Blockable()
    watch = watched(flow, connection)
    await flow.admit()  # not blocked: at once
    await asyncio.sleep(0.05)
    assert not flow.blocked and changes.count == 0
    connection.unblocked.clear()
    await changes.until(1)
    assert flow.blocked and flow.reason == BLOCKED_REASON
    waiting = [asyncio.ensure_future(flow.admit()) for _ in range(3)]
    await asyncio.sleep(0.05)
    assert not any(w.done() for w in waiting)
    assert flow.waiting == 3
    connection.unblocked.set()
    await asyncio.wait_for(asyncio.gather(*waiting), timeout=1)
    assert not flow.blocked and flow.waiting == 0
    assert changes.count == 2
    watch.cancel()


async def test_a_block_that_lasts_is_one_change() -> None:
    changes = Changes()
    flow = a_flow(changes)
    connection = Blockable()
    connection.unblocked.clear()
    watch = watched(flow, connection)
    await changes.until(1)
    await asyncio.sleep(0.1)  # many checks' worth
    assert changes.count == 1
    watch.cancel()


async def test_blocks_of_a_replaced_connection_change_nothing() -> None:
    changes = Changes()
    flow = a_flow(changes)
    old, new = Blockable(), Blockable()
    old_watch = watched(flow, old)
    new_watch = watched(flow, new)  # a new connection
    old.unblocked.clear()
    await asyncio.sleep(0.1)
    assert not flow.blocked and changes.count == 0
    assert old_watch.done()  # the old connection's watch ended by itself
    new_watch.cancel()


async def test_a_closed_connection_is_not_taken_for_a_blocked_one() -> None:
    flow = a_flow(Changes())
    connection = Blockable()
    connection.unblocked.clear()
    connection.is_closed = True
    watch = watched(flow, connection)
    await asyncio.wait_for(watch, 1)
    assert not flow.blocked


async def test_a_lost_connection_releases_the_held_deliveries() -> None:
    changes = Changes()
    flow = a_flow(changes)
    connection = Blockable()
    connection.unblocked.clear()
    watch = watched(flow, connection)
    await changes.until(1)
    waiting = asyncio.ensure_future(flow.admit())
    await asyncio.sleep(0)
    watch.cancel()  # the connection closed (BrokerLink cancels its watch)
    flow.release("connection lost")
    await asyncio.wait_for(waiting, timeout=1)
    assert not flow.blocked
