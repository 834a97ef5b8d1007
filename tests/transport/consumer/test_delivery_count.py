"""How often a job was handed out before: the broker's count, or the redelivered flag."""

from typing import Any, cast

import pytest
from aiormq.abc import AbstractChannel, DeliveredMessage
from pamqp.commands import Basic
from pamqp.header import ContentHeader

from worker.transport.consumer.delivery import delivery_count


def delivered(redelivered: bool, headers: dict[str, Any] | None) -> DeliveredMessage:
    header = ContentHeader(0, 2, Basic.Properties(headers=headers))
    frame = Basic.Deliver(delivery_tag=1, redelivered=redelivered)
    return DeliveredMessage(frame, header, b"{}", cast(AbstractChannel, None))


@pytest.mark.parametrize(
    ("redelivered", "headers", "count"),
    [
        (False, None, 0),  # a first delivery
        (True, None, 1),  # a classic queue knows only the flag
        (True, {"x-delivery-count": 3}, 3),  # a quorum queue's count
        (False, {"x-delivery-count": 2}, 2),
        # RabbitMQ 4.3: the worker died under it; the flag says so, the count does not.
        (True, {"x-delivery-count": 0}, 1),
        (True, {"x-delivery-count": True}, 1),  # not a count
    ],
)
def test_a_redelivered_job_counts_as_handed_out_before(
    redelivered: bool, headers: dict[str, Any] | None, count: int
) -> None:
    assert delivery_count(delivered(redelivered, headers)) == count
