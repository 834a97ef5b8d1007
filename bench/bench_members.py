"""What the unknown-member check costs next to rendering a job, in-process.

The check (worker/render/members.py) walks every object of a job that a model
describes, on every render. For each typical job (tests/bench_jobs, bench/jobs) this
times, side by side in one run: the check alone on the parsed job, and the whole
`Renderer.render` of the job's bytes (which includes the check), so the last column is
the check's share of a render. No broker involved.

    .venv/bin/python bench/bench_members.py
    .venv/bin/python bench/bench_members.py --rounds 20000
"""

import argparse
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from worker.render.config import load_config  # noqa: E402
from worker.render.decode import load_body  # noqa: E402
from worker.render.members import unknown_member_warnings  # noqa: E402
from worker.render.renderer import Renderer  # noqa: E402

JOBS = {
    "react": (REPO / "tests/bench_jobs/typical_react_job.json", "tests/bench_jobs/worker.yaml"),
    "chat": (REPO / "tests/bench_jobs/typical_chat_job.json", "tests/bench_jobs/worker.yaml"),
    "legacy": (REPO / "bench/jobs/typical_legacy_react_job.json", "tests/bench_jobs/worker.yaml"),
    "skill": (REPO / "bench/jobs/typical_skill_job.json", "tests/bench_jobs/worker.yaml"),
    "system_prompt": (
        REPO / "bench/jobs/typical_system_prompt_job.json",
        "bench/jobs/worker_system_prompt.yaml",
    ),
}


def per_call_us(call: Callable[[], object], rounds: int, repeat: int = 15) -> float:
    """The least over `repeat` runs of the mean time of one call, in microseconds: on
    a shared machine the least is the run least disturbed by others."""
    runs = []
    for _ in range(repeat):
        started = time.perf_counter()
        for _ in range(rounds):
            call()
        runs.append((time.perf_counter() - started) / rounds * 1e6)
    return min(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5000)
    args = parser.parse_args()
    print(f"{'job':<14} {'check us':>9} {'render us':>10} {'share':>7}")
    for name, (path, config) in JOBS.items():
        body = path.read_bytes()
        renderer = Renderer(load_config(REPO / config))
        renderer.render(body)  # warm: templates, the tool catalogue memo
        renderer.render(body)  # the catalogue's spelling is learnt from the second job
        # What the check sees in a render: the body less a known catalogue's bytes.
        data, _ = load_body(body)
        check = per_call_us(partial(unknown_member_warnings, data), args.rounds)
        render = per_call_us(partial(renderer.render, body), max(1, args.rounds // 10))
        print(f"{name:<14} {check:>9.2f} {render:>10.1f} {check / render:>7.2%}")


if __name__ == "__main__":
    main()
