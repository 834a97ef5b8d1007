"""Settling deliveries on one channel, with the acknowledgements of a short window sent as one.

A reply's publisher confirm often arrives together with the confirms of the replies
published just before it (the broker confirms several at once), and the jobs they answer
become ready to acknowledge within a few milliseconds of each other. Instead of one
`basic.ack` frame each, the first job ready opens a window of `ACK_WINDOW` seconds, and
at its end the longest run of the jobs marked by then, starting at the oldest delivery
still open, goes out as a single `basic.ack` with `multiple` set, which the broker
applies to every delivery up to that tag. The window only delays acknowledgements whose
replies are already confirmed: a link lost within it hands those jobs out again, which
at-least-once delivery already allows for (their replies are deduplicated by id).

That is only safe for deliveries this object knows are settled: `multiple` would also
acknowledge a delivery still being rendered, one being dead-lettered or requeued, or one
left unanswered for redelivery. So every delivery is registered on arrival (in the order
the channel delivered them), and a run stops at the first one that is not marked for
acknowledgement. Marked deliveries behind an open one are acknowledged one by one rather
than held back: holding them would keep their prefetch credit while a slow job renders.
Rejects and nacks are sent at once and forgotten only once their frame is written, so a
later `multiple` ack cannot overtake them. Every frame waits for the socket to take it
(aiormq's `wait`); the marks made meanwhile go out in the next batch, so a slow socket
makes batches larger rather than frames pile up.

An acknowledgement is still sent only after the reply's confirm (the caller marks a
delivery once its reply is confirmed); a channel that closes before the batch is
written leaves those jobs unacknowledged, and the broker delivers them again.
"""

import asyncio
from typing import Any

# How long the first acknowledgement waits for others to join its frame: a few of the
# broker's confirm batches at full speed, nothing next to a job's life.
ACK_WINDOW = 0.002


class AcksNotSent(Exception):
    """The channel failed while a batch of acknowledgements was being sent."""

    def __init__(self, deliveries: int, cause: BaseException) -> None:
        super().__init__(f"{deliveries} acknowledgement(s) not sent: {cause!r}")
        self.deliveries = deliveries


class BatchedAcks:
    """The open deliveries of one AMQP channel (aiormq's), and their settlement."""

    __slots__ = ("_flushing", "_last_tag", "_open", "_ordered", "channel", "window")

    def __init__(self, channel: Any, window: float = ACK_WINDOW) -> None:
        self.channel = channel
        self.window = window
        # Delivery tag -> marked for acknowledgement; in arrival order.
        self._open: dict[int, bool] = {}
        self._last_tag = 0
        # Tags number every delivery of a channel, 1, 2, 3, ... whichever consumer it
        # is for; should one ever come out of order or be skipped (a delivery this
        # object never saw, which a `multiple` ack would settle unseen), runs are not
        # trusted and every ack goes out on its own.
        self._ordered = True
        self._flushing = False

    def register(self, tag: int) -> None:
        """A delivery arrived: open until acknowledged, rejected or requeued."""
        if tag != self._last_tag + 1:
            self._ordered = False
        self._last_tag = tag
        self._open[tag] = False

    @property
    def open_count(self) -> int:
        return len(self._open)

    def is_unsettled(self, tag: int) -> bool:
        """Registered, and neither marked for acknowledgement nor rejected yet."""
        return self._open.get(tag) is False

    async def ack(self, tag: int) -> None:
        """Acknowledge a delivery whose reply is confirmed, with others of the window.

        The first caller sends the batch at the end of the window, with the deliveries
        marked meanwhile; the others return at once. Raises
        `AcksNotSent` when the channel fails under the batch (those jobs come back).
        """
        self._open[tag] = True
        if self._flushing:
            return
        self._flushing = True
        try:
            await asyncio.sleep(self.window)
            while sends := self._take():
                for index, (last, multiple, _) in enumerate(sends):
                    try:
                        await self.channel.basic_ack(last, multiple=multiple)
                    except Exception as exc:
                        raise AcksNotSent(sum(n for *_, n in sends[index:]), exc) from exc
        finally:
            self._flushing = False

    async def reject(self, tag: int, *, requeue: bool) -> None:
        """Dead-letter (requeue=False) or hand back (requeue=True) one delivery now."""
        try:
            if requeue:
                await self.channel.basic_nack(tag, requeue=True)
            else:
                await self.channel.basic_reject(tag, requeue=False)
        finally:
            # Only now: until its frame is written, no `multiple` ack may cover it.
            self._open.pop(tag, None)

    def _take(self) -> list[tuple[int, bool, int]]:
        """The acks to send for the marked deliveries, and forget those.

        Each is (tag, multiple, how many deliveries it settles).
        """
        marked = [tag for tag, done in self._open.items() if done]
        if not marked:
            return []
        run = 0
        if self._ordered:
            for done in self._open.values():
                if not done:
                    break
                run += 1
        sends = [(marked[run - 1], True, run)] if run > 1 else []
        sends += [(tag, False, 1) for tag in marked[run if run > 1 else 0 :]]
        for tag in marked:
            del self._open[tag]
        return sends
