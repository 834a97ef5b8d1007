"""Builder throughput on one core: bytes in to bytes out.

Each iteration is what the worker does per job minus the transport: orjson parse,
validation, masking (when on), formatting, rendering and reply serialisation
(`Renderer.render(body)`). The process is pinned to one CPU.

    .venv/bin/python bench/bench_builder.py            # table
    .venv/bin/python bench/bench_builder.py --json     # machine-readable
    .venv/bin/python bench/bench_builder.py --seconds 2 --repeat 7

After the table, the masking overhead of each typical job: short runs with masking on
and off back to back (`--pairs`, `--pair-seconds`), the median of the pairs' ratios.

Cases whose job file is missing (a family not yet in the tree) are skipped with a note.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from worker.render.catalogue import CATALOGUES  # noqa: E402
from worker.render.config import WorkerConfig, load_config  # noqa: E402
from worker.render.renderer import Renderer  # noqa: E402

BENCH_JOBS = REPO / "tests" / "bench_jobs"
FAMILY_JOBS = REPO / "bench" / "jobs"


@dataclass(frozen=True)
class Case:
    name: str
    job: Path
    config: Path
    target_jobs_per_s: float | None = None
    masking: bool = True
    cold_tool_cache: bool = False


CASES = [
    Case(
        "react (typical)", BENCH_JOBS / "typical_react_job.json", BENCH_JOBS / "worker.yaml", 10_000
    ),
    Case(
        "react, masking off",
        BENCH_JOBS / "typical_react_job.json",
        BENCH_JOBS / "worker.yaml",
        masking=False,
    ),
    Case(
        "react, cold tool cache",
        BENCH_JOBS / "typical_react_job.json",
        BENCH_JOBS / "worker.yaml",
        cold_tool_cache=True,
    ),
    Case("chat (typical)", BENCH_JOBS / "typical_chat_job.json", BENCH_JOBS / "worker.yaml", 5_000),
    Case(
        "chat, masking off",
        BENCH_JOBS / "typical_chat_job.json",
        BENCH_JOBS / "worker.yaml",
        masking=False,
    ),
    Case("legacy_react", FAMILY_JOBS / "typical_legacy_react_job.json", BENCH_JOBS / "worker.yaml"),
    Case("skill_react", FAMILY_JOBS / "typical_skill_job.json", BENCH_JOBS / "worker.yaml"),
    Case(
        "system_prompt tier 5 + goal",
        FAMILY_JOBS / "typical_system_prompt_job.json",
        FAMILY_JOBS / "worker_system_prompt.yaml",
    ),
]


# Each typical job with masking on and off, for `masking_overhead`.
MASKING_PAIRS = [
    (CASES[0], CASES[1]),
    (CASES[3], CASES[4]),
]
assert all(on.job == off.job and on.masking and not off.masking for on, off in MASKING_PAIRS)


def calls_per_run(func: Callable[[], object], seconds: float) -> int:
    """How many calls take about `seconds` (calling it for 0.2 s, which warms up)."""
    start = time.perf_counter()
    calls = 0
    while time.perf_counter() - start < 0.2:
        func()
        calls += 1
    return max(1, int(calls / 0.2 * seconds))


def time_per_call(func: Callable[[], object], seconds: float, repeat: int) -> list[float]:
    """Seconds per call for each of `repeat` runs of about `seconds` each."""
    per_run = calls_per_run(func, seconds)
    results = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(per_run):
            func()
        results.append((time.perf_counter() - t0) / per_run)
    return results


def prepare(case: Case) -> tuple[Renderer, bytes, int]:
    """The case's renderer, its job body and the size of the reply (checked to be ok)."""
    config = load_config(case.config)
    if not case.masking:
        config = WorkerConfig.model_validate(
            {**config.model_dump(), "masking": {**config.masking.model_dump(), "enabled": False}}
        )
    renderer = Renderer(config)
    body = case.job.read_bytes()
    # Compact, as a producer would send it: the files are pretty-printed for reading.
    body = orjson.dumps(orjson.loads(body))
    outcome = renderer.render(body)
    if not outcome.ok:
        raise SystemExit(f"{case.name}: the job does not render: {outcome.body[:300]!r}")
    return renderer, body, len(outcome.body)


def run_case(case: Case, seconds: float, repeat: int) -> dict[str, object]:
    renderer, body, reply_bytes = prepare(case)

    if case.cold_tool_cache:

        def call() -> object:
            CATALOGUES.clear()
            return renderer.render(body)
    else:

        def call() -> object:
            return renderer.render(body)

    runs = time_per_call(call, seconds, repeat)
    median = statistics.median(runs)
    return {
        "case": case.name,
        "job_bytes": len(body),
        "reply_bytes": reply_bytes,
        "median_us": round(median * 1e6, 1),
        "best_us": round(min(runs) * 1e6, 1),
        "jobs_per_s": round(1 / median),
        "target_jobs_per_s": case.target_jobs_per_s,
    }


def masking_overhead(on: Case, off: Case, seconds: float, repeat: int) -> dict[str, object]:
    """What masking adds to one job, from `repeat` pairs of short runs with it on and
    off, back to back: this shared machine's speed drifts by more than the difference
    within seconds, and two neighbouring short runs share the drift."""
    renderers = {case.masking: prepare(case)[:2] for case in (on, off)}
    off_renderer, off_body = renderers[False]
    calls_per_run(lambda: off_renderer.render(off_body), 0.2)  # warms up the off path
    on_renderer, on_body = renderers[True]
    per_run = calls_per_run(lambda: on_renderer.render(on_body), seconds)
    ratios = []
    for _ in range(repeat):
        times = {}
        for masking, (renderer, body) in renderers.items():
            t0 = time.perf_counter()
            for _ in range(per_run):
                renderer.render(body)
            times[masking] = time.perf_counter() - t0
        ratios.append(times[True] / times[False] - 1)
    q1, median, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
    return {
        "job": on.job.name,
        "median_pct": round(100 * median, 1),
        "q1_pct": round(100 * q1, 1),
        "q3_pct": round(100 * q3, 1),
        "pairs": len(ratios),
        "target_pct": 35.0,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=1.0, help="length of one timed run")
    parser.add_argument(
        "--repeat", type=int, default=5, help="timed runs per case (median reported)"
    )
    parser.add_argument(
        "--pairs",
        type=int,
        default=101,
        help="masking on/off pairs per typical job (0: skip the masking overhead)",
    )
    parser.add_argument(
        "--pair-seconds", type=float, default=0.05, help="length of each run of a pair"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--only", help="run only cases whose name contains this text")
    args = parser.parse_args()

    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})

    results, skipped = [], []
    for case in CASES:
        if args.only and args.only not in case.name:
            continue
        if not case.job.exists() or not case.config.exists():
            skipped.append(case.name)
            continue
        results.append(run_case(case, args.seconds, args.repeat))

    overheads = [
        masking_overhead(on, off, args.pair_seconds, args.pairs)
        for on, off in MASKING_PAIRS
        if args.pairs > 0 and (not args.only or args.only in on.name or args.only in off.name)
    ]

    machine = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
    }
    if args.json:
        report = {
            "machine": machine,
            "results": results,
            "masking_overhead": overheads,
            "skipped": skipped,
        }
        print(json.dumps(report, indent=2))
        return 0
    print(
        f"Python {machine['python']} on {machine['machine']}, {machine['cpus']} CPUs; pinned to one core"
    )
    print(f"{'case':32} {'job KB':>7} {'median µs':>10} {'best µs':>8} {'jobs/s':>8} {'target':>8}")
    for r in results:
        target = f"{r['target_jobs_per_s']:,}" if r["target_jobs_per_s"] else ""
        print(
            f"{r['case']:32} {int(r['job_bytes']) / 1024:7.1f} {r['median_us']:10.1f} "  # type: ignore[call-overload]
            f"{r['best_us']:8.1f} {r['jobs_per_s']:8,} {target:>8}"
        )
    for name in skipped:
        print(f"(skipped {name}: job file not present)")
    if overheads:
        print("\nmasking overhead, runs with masking on and off back to back (target <= 35%):")
    for o in overheads:
        print(
            f"  {o['job']:28} median {o['median_pct']:+.1f}%   middle half of the pairs "
            f"{o['q1_pct']:+.1f} to {o['q3_pct']:+.1f}%"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
