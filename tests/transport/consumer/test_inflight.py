"""The byte budget of jobs in flight and the prefetch that follows job sizes."""

import asyncio

import pytest

from worker.transport.consumer.inflight import ByteBudget, PrefetchPolicy

MIB = 1024 * 1024


async def test_jobs_start_only_while_their_bytes_fit_and_in_arrival_order() -> None:
    budget = ByteBudget(10 * MIB)
    started: list[str] = []

    async def job(name: str, size: int, hold: asyncio.Event) -> None:
        await budget.acquire(size)
        started.append(name)
        await hold.wait()
        budget.release(size)

    holds = {name: asyncio.Event() for name in "abcd"}
    tasks = [
        asyncio.create_task(job("a", 6 * MIB, holds["a"])),
        asyncio.create_task(job("b", 6 * MIB, holds["b"])),
        # Fits next to a, but arrives after b: waits its turn rather than overtake.
        asyncio.create_task(job("c", 1 * MIB, holds["c"])),
        asyncio.create_task(job("d", 1 * MIB, holds["d"])),
    ]
    await asyncio.sleep(0.01)
    assert started == ["a"]
    assert budget.used == 6 * MIB
    holds["a"].set()
    await asyncio.sleep(0.01)
    assert started == ["a", "b", "c", "d"]
    assert budget.peak == 8 * MIB
    for hold in holds.values():
        hold.set()
    await asyncio.gather(*tasks)
    assert budget.used == 0
    assert budget.peak <= 10 * MIB


async def test_a_job_larger_than_the_budget_runs_alone() -> None:
    budget = ByteBudget(4 * MIB)
    await budget.acquire(1 * MIB)
    big = asyncio.create_task(budget.acquire(9 * MIB))
    small = asyncio.create_task(budget.acquire(1 * MIB))
    await asyncio.sleep(0.01)
    assert not big.done() and not small.done()
    budget.release(1 * MIB)
    await asyncio.sleep(0.01)
    assert big.done() and not small.done()
    assert budget.used == 9 * MIB
    budget.release(9 * MIB)
    await asyncio.sleep(0.01)
    assert small.done()
    assert budget.peak == 9 * MIB


async def test_a_waiting_job_that_is_cancelled_gives_its_turn_away() -> None:
    budget = ByteBudget(4 * MIB)
    await budget.acquire(3 * MIB)
    waiting = asyncio.create_task(budget.acquire(3 * MIB))
    behind = asyncio.create_task(budget.acquire(1 * MIB))
    await asyncio.sleep(0.01)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await asyncio.sleep(0.01)
    assert behind.done()
    assert budget.used == 4 * MIB
    assert budget.waiting == 0


def test_small_jobs_keep_the_configured_prefetch() -> None:
    policy = PrefetchPolicy(64 * MIB, 64)
    assert all(policy.observe(2048) is None for _ in range(1000))
    assert policy.current == 64


def test_big_jobs_lower_the_prefetch_at_once_and_small_ones_raise_it_after_a_window() -> None:
    policy = PrefetchPolicy(64 * MIB, 64)
    assert policy.observe(2048) is None
    assert policy.observe(16 * MIB) == 4
    assert policy.observe(32 * MIB) == 2
    assert policy.observe(64 * MIB) == 1  # a job as large as the budget: one at a time
    # The big jobs are remembered for the rest of this window and the next one.
    changes = [policy.observe(2048) for _ in range(200)]
    raised = [c for c in changes if c is not None]
    assert raised == [64]
    assert changes.index(64) >= 64  # not before a whole window of small jobs
