"""Held replies outlive their delivery: kept for the redelivery, claimed once, bounded."""

import asyncio
from typing import Any, cast

import pytest
from aiormq.abc import AbstractChannel, DeliveredMessage
from aiormq.exceptions import DeliveryError, PublishError
from pamqp.commands import Basic
from pamqp.header import ContentHeader

from worker.ops.logs import get_logger
from worker.ops.metrics import Metrics
from worker.render.replies import RenderOutcome
from worker.transport.consumer import backpressure
from worker.transport.consumer.backpressure import (
    ReplyBackpressure,
    ReplyChannels,
    held_key,
)
from worker.transport.consumer.readiness import Readiness
from worker.transport.link.flow import BrokerFlow


def message(body: bytes = b"{}", **properties: Any) -> DeliveredMessage:
    header = ContentHeader(0, len(body), Basic.Properties(**properties))
    return DeliveredMessage(
        Basic.Deliver(delivery_tag=1, redelivered=True), header, body, cast(AbstractChannel, None)
    )


def test_a_redelivery_is_known_by_its_ids_reply_queue_and_bytes() -> None:
    job = message(b'{"a": 1}', correlation_id="c", reply_to="r", message_id="m")
    assert held_key(job) == held_key(
        message(b'{"a": 1}', correlation_id="c", reply_to="r", message_id="m")
    )
    others = [
        message(b'{"a": 2}', correlation_id="c", reply_to="r", message_id="m"),
        message(b'{"a": 1}', correlation_id="d", reply_to="r", message_id="m"),
        message(b'{"a": 1}', correlation_id="c", reply_to="s", message_id="m"),
        message(b'{"a": 1}', correlation_id="c", reply_to="r"),
        # The separator keeps one id's end from passing for the next one's start.
        message(b'{"a": 1}', correlation_id="", reply_to="cr", message_id="m"),
    ]
    assert len({held_key(job), *map(held_key, others)}) == len(others) + 1


class RefusingChannel:
    """A publishing channel the broker refuses `refusals` times, then accepts."""

    is_closed = False

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.sends = 0

    async def close(self) -> None:
        pass


def pressure(channel: RefusingChannel) -> ReplyBackpressure:
    class Connection:
        is_closed = False

        async def channel(self, **_: Any) -> RefusingChannel:
            return channel

    async def side() -> Any:
        return Connection()  # the next node's

    channels = ReplyChannels(lambda: cast(Any, Connection()), side)
    metrics = Metrics("test")
    flow = BrokerFlow(get_logger(), lambda: None)
    return ReplyBackpressure(Readiness(metrics, flow), metrics, get_logger(), channels)


def refusal() -> DeliveryError:
    return DeliveryError(None, Basic.Nack(delivery_tag=1))


async def test_a_held_reply_is_published_on_after_its_delivery_is_lost_and_claimed_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(backpressure, "REPUBLISH_PAUSE_CAP", 0.01)
    channel = RefusingChannel(refusals=3)

    async def send(publishing: Any) -> None:
        publishing.sends += 1
        if publishing.sends <= publishing.refusals:
            raise refusal()

    replies = pressure(channel)
    held = replies.hold(refusal(), RenderOutcome(b"reply", "ok"), send)
    assert replies.engaged and replies.held == 1
    key = held_key(message(b"job"))

    async def lost_delivery() -> None:
        await asyncio.shield(held.republishing)

    waiting = asyncio.ensure_future(lost_delivery())
    await asyncio.sleep(0)
    waiting.cancel()  # the channel closed under the job
    replies.orphan(key, held)

    await asyncio.wait_for(held.republishing, timeout=10)
    assert channel.sends == 4  # three refused, then confirmed
    assert not replies.engaged and replies.held == 0
    assert replies.claim(held_key(message(b"another job"))) is None
    assert replies.claim(key) is held
    assert replies.claim(key) is None


async def test_orphans_are_kept_for_a_while_and_at_most_so_many(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    replies = pressure(RefusingChannel(refusals=0))

    async def sent(_: Any) -> None:
        pass

    done = []
    for i in range(3):
        held = replies.hold(refusal(), RenderOutcome(b"reply", "ok"), sent)
        await held.republishing
        done.append(held)
        replies.orphan(bytes([i]), held)
    assert len(replies.orphans) == 3

    monkeypatch.setattr(backpressure, "ORPHANS_KEPT", 2)
    replies.orphan(b"new", done[0])
    assert len(replies.orphans) <= 2 and b"new" in replies.orphans

    monkeypatch.setattr(backpressure, "ORPHAN_KEPT_FOR", 0.0)
    forever = asyncio.get_running_loop().create_future()
    pending = replies.hold(refusal(), RenderOutcome(b"reply", "ok"), lambda _: forever)
    replies.orphan(b"pending", pending)
    # Confirmed ones go once they are old; one still being published stays.
    assert list(replies.orphans) == [b"pending"]
    await replies.close()
    assert pending.republishing.cancelled()


async def test_a_held_reply_returned_as_unroutable_opens_the_door(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The caller's queue went while its reply was refused: the broker takes publishes
    # again, so new deliveries must not wait for a confirm that will never come.
    monkeypatch.setattr(backpressure, "REPUBLISH_PAUSE_CAP", 0.01)

    async def returned(_: Any) -> None:
        frame = Basic.Return(reply_code=312, reply_text="NO_ROUTE", routing_key="gone")
        header = ContentHeader(0, 5, Basic.Properties())
        message = DeliveredMessage(frame, header, b"reply", cast(AbstractChannel, None))
        raise PublishError(message, frame)

    replies = pressure(RefusingChannel(refusals=0))
    held = replies.hold(refusal(), RenderOutcome(b"reply", "ok"), returned)
    assert replies.engaged
    with pytest.raises(PublishError):
        await asyncio.wait_for(held.republishing, timeout=10)
    assert not replies.engaged and replies.held == 0
    await asyncio.wait_for(replies.admit(), timeout=1)
