"""What the worker's per-job guards cost next to rendering a typical job, in-process.

The render deadline's event-loop slice (two `setitimer` calls around the render), the
in-flight byte budget (acquire and release) and the prefetch policy's look at the job's
size (the in-flight byte gauges are read at scrape time, not per job): each measured alone over many rounds on the
typical ReAct job, and the render of that job with and without the slice around it.
No broker involved, so the figures hold still on a busy machine far better than an
end-to-end run does.

    .venv/bin/python bench/bench_guards.py
    .venv/bin/python bench/bench_guards.py --rounds 20000
"""

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from worker.render.config import load_config  # noqa: E402
from worker.render.renderer import Renderer  # noqa: E402
from worker.transport.consumer.inflight import ByteBudget, PrefetchPolicy  # noqa: E402
from worker.transport.processes.deadline import EventLoopSlice  # noqa: E402

JOB = REPO / "tests" / "bench_jobs" / "typical_react_job.json"
CONFIG = REPO / "tests" / "bench_jobs" / "worker.yaml"


def per_call_us(call: Callable[[], object], rounds: int, repeat: int = 5) -> float:
    """Median over `repeat` runs of the mean time of one call, in microseconds."""
    runs = []
    for _ in range(repeat):
        started = time.perf_counter()
        for _ in range(rounds):
            call()
        runs.append((time.perf_counter() - started) / rounds * 1e6)
    return statistics.median(runs)


def budget_round(budget: ByteBudget, size: int) -> None:
    if not budget.try_acquire(size):
        raise AssertionError("the budget is empty: the fast path must take it")
    budget.release(size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5000)
    args = parser.parse_args()
    body = JOB.read_bytes()
    renderer = Renderer(load_config(CONFIG))
    bounded = EventLoopSlice(0.5)
    budget = ByteBudget(64 << 20)
    policy = PrefetchPolicy(64 << 20, 64)
    size = len(body)
    for _ in range(200):  # warm the renderer's memo, as a running worker has it
        renderer.render(body)

    render = per_call_us(lambda: renderer.render(body), args.rounds)
    render_sliced = per_call_us(lambda: bounded.run(renderer.render, body), args.rounds)
    slice_alone = per_call_us(lambda: bounded.run(len, body), args.rounds * 10)
    budget_cost = per_call_us(lambda: budget_round(budget, size), args.rounds * 10)
    policy_cost = per_call_us(lambda: policy.observe(size), args.rounds * 10)
    bounded.close()
    guards = slice_alone + budget_cost + policy_cost
    print(f"# {len(body)} B typical ReAct job, {args.rounds} rounds, load {os.getloadavg()[0]:.2f}")
    print("| what | µs per job |")
    print("|---|---|")
    print(f"| render | {render:.1f} |")
    print(f"| render inside the event-loop slice | {render_sliced:.1f} |")
    print(f"| the slice alone (two setitimer calls) | {slice_alone:.2f} |")
    print(f"| byte budget acquire + release | {budget_cost:.2f} |")
    print(f"| prefetch policy | {policy_cost:.2f} |")
    print(f"| all guards | {guards:.2f} ({guards / render * 100:.1f}% of the render) |")


if __name__ == "__main__":
    main()
