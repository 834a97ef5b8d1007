"""`BrokerFlow` and its `FrameTap`: the broker's blocked / unblocked frames, read from
the bytes the broker sends, whichever way the socket cuts them."""

import asyncio

import pamqp.frame
import structlog
from pamqp import commands
from pamqp.body import ContentBody
from pamqp.header import ContentHeader

from worker.transport.link.flow import BrokerFlow, FrameTap


class Changes:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def a_flow(changes: Changes) -> BrokerFlow:
    return BrokerFlow(structlog.get_logger(), changes)


def blocked(reason: str) -> bytes:
    return pamqp.frame.marshal(commands.Connection.Blocked(reason=reason), 0)


UNBLOCKED = pamqp.frame.marshal(commands.Connection.Unblocked(), 0)


def a_delivery(channel: int, body: bytes) -> bytes:
    """The three frames of a delivery on `channel` (its body may hold any bytes)."""
    return b"".join(
        [
            pamqp.frame.marshal(
                commands.Basic.Deliver(consumer_tag="c", delivery_tag=1, routing_key="q"),
                channel,
            ),
            pamqp.frame.marshal(ContentHeader(body_size=len(body)), channel),
            pamqp.frame.marshal(ContentBody(body), channel),
        ]
    )


def feed_in_pieces(tap: FrameTap, data: bytes, size: int) -> None:
    for start in range(0, len(data), size):
        tap.feed(data[start : start + size])


async def test_deliveries_wait_while_blocked_and_pass_when_unblocked() -> None:
    changes = Changes()
    flow = a_flow(changes)
    tap = flow.tap()
    await flow.admit()  # not blocked: at once
    tap.feed(blocked("low on memory"))
    assert flow.blocked and flow.reason == "low on memory"
    waiting = [asyncio.ensure_future(flow.admit()) for _ in range(3)]
    await asyncio.sleep(0.01)
    assert not any(w.done() for w in waiting)
    assert flow.waiting == 3
    tap.feed(UNBLOCKED)
    await asyncio.wait_for(asyncio.gather(*waiting), timeout=1)
    assert not flow.blocked and flow.waiting == 0
    assert changes.count == 2


async def test_the_frames_are_found_however_the_bytes_are_cut() -> None:
    # A body that holds the very bytes of a blocked frame must not be read as one; the
    # real frames are found between deliveries, whatever the chunk size.
    decoy = blocked("not a frame: a job's body")
    stream = b"".join(
        [
            a_delivery(1, decoy * 50),
            blocked("low on disk"),
            a_delivery(2, b"x" * 70_000),
            a_delivery(1, decoy),
        ]
    )
    for size in (1, 2, 7, 8, 13, 1000, 4096, len(stream)):
        flow = a_flow(Changes())
        feed_in_pieces(flow.tap(), stream, size)
        assert flow.blocked and flow.reason == "low on disk", size


async def test_a_stream_without_an_alarm_blocks_nothing() -> None:
    changes = Changes()
    flow = a_flow(changes)
    stream = a_delivery(1, blocked("inside a body") + UNBLOCKED) * 20
    feed_in_pieces(flow.tap(), stream, 3)
    assert not flow.blocked and changes.count == 0


async def test_frames_of_a_replaced_connection_change_nothing() -> None:
    changes = Changes()
    flow = a_flow(changes)
    old = flow.tap()
    flow.tap()  # a new connection
    old.feed(blocked("low on memory"))
    assert not flow.blocked and changes.count == 0


async def test_a_lost_connection_releases_the_held_deliveries() -> None:
    flow = a_flow(Changes())
    flow.tap().feed(blocked("low on disk"))
    waiting = asyncio.ensure_future(flow.admit())
    await asyncio.sleep(0)
    flow.release("connection lost")
    await asyncio.wait_for(waiting, timeout=1)
    assert not flow.blocked


async def test_a_refused_protocol_version_stops_the_tap() -> None:
    # A broker that does not speak AMQP 0-9-1 answers with its protocol header, not
    # frames: the tap reads nothing more on that connection rather than misread it.
    flow = a_flow(Changes())
    tap = flow.tap()
    tap.feed(b"AMQP\x00\x00\x09\x01" + blocked("never read"))
    assert tap.lost and not flow.blocked
