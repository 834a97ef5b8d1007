"""The largest reply the broker accepts.

RabbitMQ refuses a message larger than its `max_message_size` by closing the channel
it was published on (406 PRECONDITION_FAILED), which also drops the delivery tags of
every other job in flight on it: they come back, and the refused job, redelivered,
would do the same again on every delivery. The worker therefore checks each reply's
size before publishing it. The broker does not announce its limit, so the worker
starts from RabbitMQ's default and learns the real one from the first refusal's
message ("message size N is larger than configured max size M").
"""

import re

# RabbitMQ's max_message_size when nobody set it (3.8 and later).
BROKER_DEFAULT_MAX_MESSAGE_BYTES = 128 * 1024 * 1024
_REFUSAL = re.compile(r"larger than configured max size (\d+)")


def limit_from_refusal(error: BaseException) -> int | None:
    """The broker's limit, when `error` is its refusal of an oversized message."""
    match = _REFUSAL.search(str(error))
    return int(match.group(1)) if match else None
