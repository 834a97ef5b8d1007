"""The one backoff: pauses that double from a first one up to a cap.

Every pause of the transport comes from here: between two attempts to reach the
broker, the worker's (`BrokerLink`) and a producer's (`RpcLink`), and between two starts
of a `serve` process that keeps dying young (`Backoff`, with jitter, so that a fleet
does not come back in lockstep after a broker restart); before a job that failed for a
reason outside itself goes back to the queue (`backoff(attempt)`: without a pause it
would come straight back, a hot loop bounded only by the delivery limit); and between
attempts to consume a queue the broker deleted or to publish a reply the broker refused.
"""

import random
from collections.abc import Callable

FIRST_BACKOFF = 0.5
MAX_BACKOFF = 10.0
# Longest pause between two connection attempts.
RECONNECT_BACKOFF_CAP = 30.0
# Each connection pause is shortened by up to this fraction, at random.
JITTER = 0.2


def backoff(attempt: int, first: float = FIRST_BACKOFF, cap: float = MAX_BACKOFF) -> float:
    """Seconds to wait after failure number `attempt` (0 for the first)."""
    # Bounded exponent: the cap is reached long before, and 2.0 ** n overflows.
    return min(cap, first * 2.0 ** min(attempt, 32))


class Backoff:
    """`backoff` counted across failures, each pause cut by up to `JITTER` at random."""

    def __init__(
        self,
        first: float,
        cap: float = RECONNECT_BACKOFF_CAP,
        uniform: Callable[[], float] = random.random,
    ) -> None:
        self.first = max(first, 0.1)
        self.cap = max(cap, self.first)
        self.failures = 0
        self._uniform = uniform

    def next(self) -> float:
        """The pause after one more failure."""
        delay = backoff(self.failures, self.first, self.cap)
        self.failures += 1
        return round(delay * (1 - JITTER * self._uniform()), 2)

    def reset(self) -> None:
        self.failures = 0
