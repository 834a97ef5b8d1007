"""Ending a long-lived task: a reconnect loop whose cancellation was lost still ends."""

import asyncio

from worker.tasks import cancel_for_good


async def test_a_loop_that_lost_its_cancellation_is_cancelled_again() -> None:
    loop = asyncio.get_running_loop()
    attempts: list[asyncio.Future[None]] = []
    waiting = asyncio.Event()

    async def reconnect_for_ever() -> None:
        # A broker link's loop: each attempt waits for a connection, bounded, and a
        # refused one is retried.
        while True:
            attempt = loop.create_future()
            attempts.append(attempt)
            waiting.set()
            try:
                await asyncio.wait_for(attempt, 60)
            except ConnectionRefusedError:
                continue

    task = asyncio.create_task(reconnect_for_ever())
    await waiting.wait()
    # The attempt fails in the very turn the stop cancels the loop (cancel_for_good's
    # first cancel comes before it yields): on Python 3.11, wait_for raises the
    # attempt's error and that cancellation is gone.
    attempts[0].set_exception(ConnectionRefusedError())
    await asyncio.wait_for(cancel_for_good(task), 10)
    assert task.cancelled()


async def test_a_task_that_already_ended_is_left_as_it_was() -> None:
    async def done() -> int:
        return 7

    task = asyncio.create_task(done())
    await task
    await cancel_for_good(task)
    assert task.result() == 7
