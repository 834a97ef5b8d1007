"""The bytes of jobs being handled at once, bounded.

Prefetch bounds how many deliveries a worker holds, not how big they are: 64 jobs at
the 32 MiB limit, each parsed, masked, rendered and serialised again, would take many
times the memory a worker is given. A delivery therefore starts being handled only
once its body fits in the budget next to those already being handled; until then it
waits, in arrival order (so a big job is not starved by small ones arriving after
it). A job larger than the whole budget is handled alone, once nothing else is.
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

    async def acquire(self, size: int) -> None:
        """Wait until `size` bytes may be handled, and take them (give them back with
        `release`)."""
        if not self._waiting and self._fits(size):
            self._take(size)
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
