"""The bytes of jobs a worker holds, bounded.

Prefetch bounds how many deliveries a worker holds, not how big they are: 64 jobs at
the 32 MiB limit, each parsed, masked, rendered and serialised again, would take many
times the memory a worker is given. Two measures keep the bytes within a budget:

* `ByteBudget`: a delivery starts being handled only once its body fits in the budget
  next to those already being handled; until then it waits, in arrival order (so a big
  job is not starved by small ones arriving after it). A job larger than the whole
  budget is handled alone, once nothing else is. This bounds the memory of handling,
  which is several times the body's.
* `PrefetchPolicy`: the broker hands out up to `prefetch` jobs whatever their size, so
  when big jobs arrive the worker consumes again with a prefetch that fits the budget
  (budget / the biggest recent job), and returns to the configured prefetch once the
  jobs are small again. The broker decides what to send before the worker sees it, so
  the first jobs of a sudden run of big ones can still arrive together (up to the
  prefetch in effect, each up to the message limit); only `prefetch x
  max-message-bytes` bounds that burst (docs/OPERATIONS.md, "Memory").
"""

import asyncio
from collections import deque


class ByteBudget:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0  # bytes of the deliveries being handled
        self.peak = 0  # the highest `used` seen
        self._waiting: deque[tuple[int, asyncio.Future[None]]] = deque()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def _fits(self, size: int) -> bool:
        return self.used == 0 or self.used + size <= self.limit

    def _take(self, size: int) -> None:
        self.used += size
        self.peak = max(self.peak, self.used)

    def try_acquire(self, size: int) -> bool:
        """Take `size` bytes if they fit now and nobody waits (the usual case, without
        the cost of a coroutine)."""
        if not self._waiting and self._fits(size):
            self._take(size)
            return True
        return False

    async def acquire(self, size: int) -> None:
        """Wait until `size` bytes may be handled, and take them (give them back with
        `release`)."""
        if self.try_acquire(size):
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (size, granted)
        self._waiting.append(entry)
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                # Granted, then cancelled before it could run: hand the bytes on.
                self.release(size)
            else:
                self._waiting.remove(entry)
                self._wake()
            raise

    def release(self, size: int) -> None:
        self.used -= size
        self._wake()

    def _wake(self) -> None:
        while self._waiting and self._fits(self._waiting[0][0]):
            size, granted = self._waiting.popleft()
            self._take(size)
            granted.set_result(None)


class PrefetchPolicy:
    """The prefetch that keeps `prefetch x recent job size` within the budget.

    Sizes are remembered over the last one to two windows of `ceiling` deliveries.
    `observe` returns a new prefetch when the consumer should switch: at once when a
    big job calls for less, and only at the end of a window when small jobs allow more
    (so a run of mixed sizes does not flip the consumer back and forth).
    """

    def __init__(self, budget: int, ceiling: int) -> None:
        self.budget = budget
        self.ceiling = ceiling
        self.current = ceiling
        self._seen = 0
        self._window_max = 0
        self._previous_max = 0

    def _fitting(self, size: int) -> int:
        return max(1, min(self.ceiling, self.budget // max(size, 1)))

    def observe(self, size: int) -> int | None:
        """Note one delivery's size; the prefetch to switch to, or None to keep it."""
        self._window_max = max(self._window_max, size)
        self._seen += 1
        if self._seen >= self.ceiling:
            self._previous_max, self._window_max, self._seen = self._window_max, 0, 0
        target = self._fitting(max(self._window_max, self._previous_max))
        if target < self.current or (target > self.current and self._seen == 0):
            self.current = target
            return target
        return None
