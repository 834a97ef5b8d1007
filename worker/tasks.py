"""Ending the worker's long-lived tasks (the broker link's loop, the archive's)."""

import asyncio
from typing import Any

# How long a cancelled task may run on before it is cancelled again.
CANCEL_AGAIN_AFTER = 0.5


async def cancel_for_good(task: "asyncio.Task[Any]") -> None:
    """Cancel `task` and wait until it has ended, cancelling it again while it runs on.

    One cancel is not always enough: Python 3.11's `asyncio.wait_for` loses a
    cancellation that arrives in the same loop turn as the awaited future finishes
    (CPython gh-86296), and a reconnect loop that took its error for a failed attempt
    would then try again for ever, holding up the stop until a second signal. The
    task's outcome is left for the caller to collect.
    """
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=CANCEL_AGAIN_AFTER)
