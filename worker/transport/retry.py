"""How long a job waits before it is handed back to the queue, by its delivery count.

A job that failed for a reason outside itself (a full reply queue, a bug of ours) is
requeued, and RabbitMQ hands it out again at once: without a pause each failure would
come straight back, a hot loop bounded only by the delivery limit. The pause doubles
with each delivery and is capped, so a job spends at most a few tens of seconds
retrying before its last delivery settles it for good (CONTRACT.md §4). The same
pauses space the attempts to consume a queue the broker deleted (the worker's request
queue, a producer's reply queue) once more.
"""

FIRST_BACKOFF = 0.5
MAX_BACKOFF = 10.0


def backoff(attempt: int, first: float = FIRST_BACKOFF, cap: float = MAX_BACKOFF) -> float:
    """Seconds to wait before requeueing delivery number `attempt` (0 for the first)."""
    return min(cap, first * 2.0 ** min(attempt, 32))
