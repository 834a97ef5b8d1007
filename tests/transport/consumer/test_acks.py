"""Batched acknowledgements (`worker.transport.consumer.acks`), against a model of the broker's
rules for one channel: a delivery is settled once; `multiple` settles every open delivery
up to its tag; settling a tag that is not open is a channel error."""

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.transport.consumer.acks import AcksNotSent, BatchedAcks


class Broker:
    """What RabbitMQ does with the settlement frames of one channel."""

    def __init__(self) -> None:
        self.unacked: set[int] = set()
        self.acked: list[int] = []
        self.rejected: list[tuple[int, bool]] = []
        self.frames: list[str] = []

    def deliver(self, tag: int) -> None:
        self.unacked.add(tag)

    def _settle(self, tag: int, multiple: bool) -> list[int]:
        if tag not in self.unacked:
            raise AssertionError(f"PRECONDITION_FAILED - unknown delivery tag {tag}")
        tags = sorted(t for t in self.unacked if t <= tag) if multiple else [tag]
        self.unacked.difference_update(tags)
        return tags

    async def basic_ack(self, tag: int, multiple: bool = False, wait: bool = True) -> None:
        self.frames.append(f"ack {tag}{' multiple' if multiple else ''}")
        self.acked += self._settle(tag, multiple)

    async def basic_reject(self, tag: int, *, requeue: bool = True, wait: bool = True) -> None:
        self.frames.append(f"reject {tag}")
        self.rejected += [(t, requeue) for t in self._settle(tag, False)]

    async def basic_nack(
        self, tag: int, multiple: bool = False, requeue: bool = True, wait: bool = True
    ) -> None:
        self.frames.append(f"nack {tag}")
        self.rejected += [(t, requeue) for t in self._settle(tag, multiple)]


def opened(broker: Broker, tags: range) -> BatchedAcks:
    acks = BatchedAcks(broker)
    for tag in tags:
        broker.deliver(tag)
        acks.register(tag)
    return acks


async def test_acks_of_one_loop_turn_go_out_as_one_frame() -> None:
    broker = Broker()
    acks = opened(broker, range(1, 6))
    await asyncio.gather(*(acks.ack(tag) for tag in (2, 1, 3)))
    assert broker.frames == ["ack 3 multiple"]
    assert broker.acked == [1, 2, 3]
    assert broker.unacked == {4, 5}


async def test_acks_marked_within_the_window_go_out_as_one_frame() -> None:
    broker = Broker()
    acks = BatchedAcks(broker, window=0.2)
    for tag in range(1, 5):
        broker.deliver(tag)
        acks.register(tag)
    first = asyncio.ensure_future(acks.ack(1))
    await asyncio.sleep(0.05)  # later loop turns, within the window
    await acks.ack(2)  # returns at once: the first caller sends it
    await acks.ack(3)
    assert broker.frames == []
    await first
    assert broker.frames == ["ack 3 multiple"]
    assert broker.unacked == {4}


async def test_a_delivery_in_flight_stops_the_run_and_those_behind_go_singly() -> None:
    broker = Broker()
    acks = opened(broker, range(1, 7))
    # 3 is still rendering: a multiple ack of 5 would settle it too.
    await asyncio.gather(*(acks.ack(tag) for tag in (1, 2, 4, 5)))
    assert broker.frames == ["ack 2 multiple", "ack 4", "ack 5"]
    assert broker.unacked == {3, 6}
    await acks.reject(3, requeue=False)
    await acks.ack(6)
    assert broker.frames[-2:] == ["reject 3", "ack 6"]
    assert broker.rejected == [(3, False)]
    assert acks.open_count == 0


async def test_a_delivery_left_for_redelivery_is_never_covered() -> None:
    broker = Broker()
    acks = opened(broker, range(1, 4))
    await asyncio.gather(acks.ack(2), acks.ack(3))  # 1 is never settled
    assert broker.frames == ["ack 2", "ack 3"]
    assert broker.unacked == {1}
    assert acks.is_unsettled(1) and not acks.is_unsettled(2)


async def test_tags_out_of_order_are_acked_one_by_one() -> None:
    broker = Broker()
    acks = BatchedAcks(broker)
    for tag in (2, 1, 3):
        broker.deliver(tag)
        acks.register(tag)
    await asyncio.gather(*(acks.ack(tag) for tag in (2, 1, 3)))
    assert broker.frames == ["ack 2", "ack 1", "ack 3"]


async def test_a_delivery_never_registered_is_never_covered_by_a_multiple_ack() -> None:
    # Delivery 3 reached the channel but not this object (a consumer cancelled under
    # it, say): acknowledging 4 with `multiple` would settle it unanswered.
    broker = Broker()
    acks = BatchedAcks(broker)
    for tag in (1, 2, 3, 4):
        broker.deliver(tag)
    for tag in (1, 2, 4):
        acks.register(tag)
    await asyncio.gather(*(acks.ack(tag) for tag in (1, 2, 4)))
    assert broker.unacked == {3}
    assert sorted(broker.acked) == [1, 2, 4]


async def test_a_channel_failing_under_a_batch_says_how_many_jobs_it_held() -> None:
    class Closed(Broker):
        async def basic_ack(self, tag: int, multiple: bool = False, wait: bool = True) -> None:
            raise ConnectionError("channel closed")

    broker = Closed()
    acks = opened(broker, range(1, 5))
    results: list[Any] = await asyncio.gather(
        *(acks.ack(tag) for tag in (1, 2, 3)), return_exceptions=True
    )
    [failure] = [r for r in results if r is not None]
    assert isinstance(failure, AcksNotSent)
    assert failure.deliveries == 3
    # The next delivery's ack is tried again: the lost ones are not retried on it.
    with pytest.raises(AcksNotSent) as raised:
        await acks.ack(4)
    assert raised.value.deliveries == 1


# A delivery's fate, and after how many loop turns it is decided.
FATES = st.sampled_from(["ack", "ack", "ack", "dead_letter", "requeue", "left"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(FATES, st.integers(0, 4)), min_size=1, max_size=40))
def test_every_delivery_is_settled_once_as_decided(plan: list[tuple[str, int]]) -> None:
    async def run() -> Broker:
        broker = Broker()
        acks = opened(broker, range(1, len(plan) + 1))

        async def handle(tag: int, fate: str, turns: int) -> None:
            for _ in range(turns):
                await asyncio.sleep(0)
            if fate == "ack":
                await acks.ack(tag)
            elif fate != "left":
                await acks.reject(tag, requeue=fate == "requeue")

        await asyncio.gather(*(handle(i + 1, *step) for i, step in enumerate(plan)))
        return broker

    broker = asyncio.run(run())
    decided = {tag: fate for tag, (fate, _) in enumerate(plan, start=1)}
    assert sorted(broker.acked) == [t for t, f in decided.items() if f == "ack"]
    assert sorted(broker.rejected) == sorted(
        (t, f == "requeue") for t, f in decided.items() if f in ("dead_letter", "requeue")
    )
    assert broker.unacked == {t for t, f in decided.items() if f == "left"}
    ack_frames = [f for f in broker.frames if f.startswith("ack")]
    assert len(ack_frames) <= len(broker.acked)
