"""Run the benchmarks behind docs/PERFORMANCE.md's table and write the results.

    bench/run                      # every benchmark of the table (about 10 minutes)
    bench/run --skip e2e           # without RabbitMQ
    bench/run --table-only         # rebuild bench/results.md from bench/results.json

Each benchmark runs as its own process with `--json`; the figures go to
bench/results.json (with the commit, the machine and the load average) and the table
to bench/results.md, which is the table docs/PERFORMANCE.md shows (tests/test_docs.py
checks that they agree). A skipped benchmark keeps its figures of the last run.
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULTS_JSON = REPO / "bench" / "results.json"
RESULTS_MD = REPO / "bench" / "results.md"

# name -> the benchmark's command line (the JSON goes to stdout unless `{out}` is given).
BENCHMARKS: dict[str, list[str]] = {
    "builder": ["bench/bench_builder.py", "--json", "--only", "typical", "--repeat", "3"],
    "startup": ["bench/bench_startup.py", "--json", "--rounds", "9"],
    "render": ["bench/bench_render.py", "--json", "--jobs", "10000", "--rounds", "3"],
    "rerender": ["bench/bench_rerender.py", "--json", "--only", "local", "--jobs", "20000"],
    "e2e": ["bench/bench_e2e.py", "--repeat", "3", "--workers", "echo,render", "--json", "{out}"],
}

Results = dict[str, Any]
Row = tuple[str, str, bool | None]


def run_benchmark(name: str) -> Any:
    command = [sys.executable, *BENCHMARKS[name]]
    with tempfile.TemporaryDirectory(prefix="bench-run-") as workdir:
        out = Path(workdir) / "figures.json"
        command = [str(out) if part == "{out}" else part for part in command]
        print(f"bench/run: {' '.join(command[1:])}", file=sys.stderr, flush=True)
        run = subprocess.run(
            command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True
        )
        return json.loads(out.read_text() if out.exists() else run.stdout)


def _fmt(value: float) -> str:
    return f"{value:,.0f}"


def _job_name(job: str) -> str:
    """`typical_react_job.json` -> `react`."""
    return job.split()[0].removeprefix("typical_").removesuffix(".json").removesuffix("_job")


def builder_rows(figures: Any) -> list[Row]:
    by_case = {r["case"]: r for r in figures["results"]}
    rows: list[Row] = []
    for case, target in (("react (typical)", 10_000), ("chat (typical)", 5_000)):
        if case in by_case:
            rate = by_case[case]["jobs_per_s"]
            rows.append(
                (
                    f"builder, {case.split()[0]} job ≥ {target:,} jobs/s on one core",
                    f"{_fmt(rate)} jobs/s ({by_case[case]['median_us']} µs)",
                    rate >= target,
                )
            )
    overheads = figures.get("masking_overhead", [])
    if overheads:
        text = ", ".join(f"{_job_name(o['job'])} {o['median_pct']:+.1f}%" for o in overheads)
        worst = max(o["median_pct"] for o in overheads)
        rows.append(("masking adds ≤ 25% per job (builder)", text, worst <= 25.0))
    return rows


def startup_rows(figures: Any) -> list[Row]:
    by_case = {r["case"]: r for r in figures["results"]}
    yardstick = by_case["baseline (import 4 libs)"]["median_ms"]
    rows: list[Row] = []
    for label, cases, target in (
        ("`--help`, `schema` ≤ 0.5× importing the usual libraries", ("--help", "schema"), 0.5),
        ("`render` one job, `mask` one text ≤ 1.6× that import", ("render one job", "mask one text"), 1.6),
    ):  # fmt: skip
        ratios = [by_case[case]["ratio_to_baseline"] for case in cases]
        text = " and ".join(f"{ratio:.2f}×" for ratio in ratios) + f" (the import {yardstick} ms)"
        rows.append((label, text, max(ratios) <= target))
    return rows


def render_rows(figures: Any) -> list[Row]:
    return [
        (
            "`render` over 10,000 jobs ≥ 0.8 of the in-process rate, start-up included",
            f"one core {figures['ratio_wall']:.2f}; every core "
            f"{figures['all_cores_ratio_wall']:.2f} ({_fmt(figures['all_cores_jobs_per_s'])} jobs/s)",
            figures["all_cores_ratio_wall"] >= 0.8,
        )
    ]


def rerender_rows(figures: Any) -> list[Row]:
    rates = {r["name"]: r["jobs_per_s"] for r in figures}
    one, two = rates["local-1"], rates["local-2"]
    return [
        (
            "rerender `--local`, 2 workers ≥ 1.7× one",
            f"{two / one:.2f}× ({_fmt(one)} and {_fmt(two)} jobs/s)",
            two / one >= 1.7,
        )
    ]


def e2e_rows(figures: Any) -> list[Row]:
    by_key = {(f["worker"], f["processes"]): f for f in figures}
    rows: list[Row] = []
    for processes in sorted({f["processes"] for f in figures}):
        echo, worker = by_key[("echo", processes)], by_key[("render", processes)]
        drain = worker["drain_jobs_per_s"] / echo["drain_jobs_per_s"]
        cpu = worker["cpu_ms_per_job"] / echo["cpu_ms_per_job"]
        label = f"{processes} process" + ("es" if processes > 1 else "")
        rows += [
            (
                f"through RabbitMQ, {label}: drains faster than the aio-pika echo",
                f"{_fmt(worker['drain_jobs_per_s'])} against {_fmt(echo['drain_jobs_per_s'])} jobs/s ({drain:.0%})",
                drain > 1.0,
            ),
            (
                f"through RabbitMQ, {label}: CPU a job ≤ 0.85× the echo's",
                f"{worker['cpu_ms_per_job']:.3f} against {echo['cpu_ms_per_job']:.3f} ms ({cpu:.2f}×)",
                cpu <= 0.85,
            ),
            (
                f"through RabbitMQ, {label}: sequential p99 < 5 ms",
                f"{worker['seq_p99_ms']:.2f} ms",
                worker["seq_p99_ms"] < 5.0,
            ),
        ]  # fmt: skip
    return rows


ROWS: dict[str, Callable[[Any], list[Row]]] = {
    "builder": builder_rows,
    "startup": startup_rows,
    "render": render_rows,
    "rerender": rerender_rows,
    "e2e": e2e_rows,
}


def table(results: Results) -> str:
    """The Markdown table of `results`, in the order of BENCHMARKS."""
    lines = ["| target | measured | |", "|---|---|---|"]
    for name in BENCHMARKS:
        if name in results["figures"]:
            for target, measured, met in ROWS[name](results["figures"][name]):
                verdict = "met" if met else "**missed**"
                lines.append(f"| {target} | {measured} | {verdict} |")
    return "\n".join(lines) + "\n"


def header(results: Results) -> str:
    machine = results["machine"]
    low, median, high = results["loadavg"]
    return (
        f"Measured {results['date']} at `{results['commit']}`: {machine['cpus']} cores "
        f"({machine['processor']}), Python {machine['python']}; load average "
        f"{low:.1f} to {high:.1f} (median {median:.1f}) as the benchmarks started.\n"
    )


def describe_machine() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
    }


def commit() -> str:
    run = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    )
    return run.stdout.strip() or "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--skip", action="append", default=[], choices=sorted(BENCHMARKS))
    parser.add_argument("--table-only", action="store_true", help="rebuild results.md only")
    args = parser.parse_args()
    results: Results = json.loads(RESULTS_JSON.read_text()) if RESULTS_JSON.exists() else {}
    if not args.table_only:
        loads: list[float] = []
        figures = dict(results.get("figures", {}))
        for name in BENCHMARKS:
            if name not in args.skip:
                loads.append(os.getloadavg()[0])
                figures[name] = run_benchmark(name)
        loads.append(os.getloadavg()[0])
        results = {
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
            "commit": commit(),
            "machine": describe_machine(),
            "loadavg": [min(loads), statistics.median(loads), max(loads)],
            "figures": figures,
        }
        RESULTS_JSON.write_text(json.dumps(results, indent=2) + "\n")
    RESULTS_MD.write_text(header(results) + "\n" + table(results))
    print(RESULTS_MD.read_text(), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
