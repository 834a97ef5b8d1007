"""Run the benchmarks behind docs/PERFORMANCE.md's table and write the results.

    bench/run                      # every benchmark of the table (about 10 minutes)
    bench/run --skip e2e           # without RabbitMQ
    bench/run --table-only         # rebuild bench/results.md from bench/results.json
    bench/run --before /tmp/before # this tree against another, side by side

Each benchmark runs as its own process with `--json`; the figures go to
bench/results.json (with the commit, the machine and the load average) and the table
to bench/results.md, which is the table docs/PERFORMANCE.md shows (tests/test_docs.py
checks that they agree). A skipped benchmark keeps its figures of the last run.

`--before TREE` measures an earlier checkout beside this one (`git archive REV | tar -x
-C TREE`; it runs on this checkout's virtual environment): each benchmark runs in this
tree and then in that one, the end-to-end drains of both workers interleaved with the
echo's in one run, the builder's instructions a job also counted by valgrind
(bench/bench_instructions.py: the same on every run, where timings drift), and both
trees render the conformance cases and collect their test suites. The figures go to bench/before_after.json and the table to
bench/before_after.md; this tree's figures are also written as the latest
(bench/results.json and .md).
"""

import argparse
import datetime
import json
import os
import platform
import shutil
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
BEFORE_AFTER_JSON = REPO / "bench" / "before_after.json"
BEFORE_AFTER_MD = REPO / "bench" / "before_after.md"
CONFORMANCE = REPO / "tests" / "conformance"

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


def run_benchmark(name: str, tree: Path = REPO, extra: tuple[str, ...] = ()) -> Any:
    """The figures of one benchmark, run from `tree`'s bench/ (this interpreter)."""
    command = [sys.executable, *BENCHMARKS[name], *extra]
    with tempfile.TemporaryDirectory(prefix="bench-run-") as workdir:
        out = Path(workdir) / "figures.json"
        command = [str(out) if part == "{out}" else part for part in command]
        print(f"bench/run ({tree}): {' '.join(command[1:])}", file=sys.stderr, flush=True)
        run = subprocess.run(
            command, cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True
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
        rows.append(("masking adds ≤ 35% per job (builder)", text, worst <= 35.0))
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


# Run in a tree: render this checkout's conformance cases with that tree's renderer.
CONFORMANCE_CHECK = """
import json, sys
sys.path.insert(0, ".")
from worker.render.config import load_config
from worker.render.renderer import Renderer
renderer = Renderer(load_config(sys.argv[1]))
total = exact = 0
for path in sys.argv[2:]:
    for line in open(path, encoding="utf-8"):
        case = json.loads(line)
        total += 1
        outcome = renderer.render(json.dumps(case["job"]).encode())
        if outcome.status == "ok" and json.loads(outcome.body)["messages"] == case["expected_messages"]:
            exact += 1
print(json.dumps({"cases": total, "byte_exact": exact}))
"""


def conformance(tree: Path) -> dict[str, int]:
    """How many of the reference renderings `tree` renders to the byte."""
    cases = [str(CONFORMANCE / name) for name in ("cases.jsonl", "families.jsonl")]
    run = subprocess.run(
        [sys.executable, "-c", CONFORMANCE_CHECK, str(CONFORMANCE / "worker.yaml"), *cases],
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(run.stdout))


def collected(tree: Path) -> dict[str, int]:
    """The tests `tree`'s suite collects: all, and those of its broker and failure
    suites (tests/integration)."""
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    )
    tests = [line for line in run.stdout.splitlines() if "::" in line]
    return {
        "tests": len(tests),
        "integration": sum(1 for test in tests if test.startswith("tests/integration/")),
    }


def split_e2e(figures: list[dict[str, Any]]) -> tuple[list[Any], list[Any]]:
    """A `bench_e2e.py --before` run's figures as two runs, this tree's and the tree
    before's, each with the echo drains of the run (the worker before is `before`)."""
    now = [f for f in figures if f["worker"] in ("echo", "render")]
    then = [
        {**f, "worker": "render"} if f["worker"] == "before" else f
        for f in figures
        if f["worker"] in ("echo", "before")
    ]
    return now, then


def builder_instructions(before: Path) -> dict[str, dict[str, int]]:
    """Instructions a typical job costs the builder, by tree ("now", "before") and job,
    counted by valgrind (bench/bench_instructions.py); empty without valgrind."""
    if shutil.which("valgrind") is None:
        print("bench/run: no valgrind, no instruction counts", file=sys.stderr)
        return {}
    command = [sys.executable, "bench/bench_instructions.py", "--json", "--tree", str(before)]
    print(f"bench/run: {' '.join(command[1:])}", file=sys.stderr, flush=True)
    run = subprocess.run(command, cwd=REPO, stdout=subprocess.PIPE, check=True)
    counts: dict[str, dict[str, int]] = {"now": {}, "before": {}}
    for result in json.loads(run.stdout)["results"]:
        which = "now" if Path(result["tree"]) == REPO else "before"
        counts[which][result["job"]] = result["instructions_per_job"]
    return counts


def builder_instructions_row(counts: dict[str, dict[str, int]]) -> str:
    before, now = counts["before"], counts["now"]
    cells = [
        ", ".join(f"{job} {count:,}" for job, count in before.items()),
        ", ".join(f"{job} {count:,} ({count / before[job]:.3f}×)" for job, count in now.items()),
    ]
    return f"| builder, instructions a typical job (valgrind) | {cells[0]} | {cells[1]} |"


def before_after(before: Path, before_name: str, skip: list[str]) -> Results:
    """Each benchmark of the table in this tree and in `before`, one after the other."""
    loads: list[float] = []
    now: dict[str, Any] = {}
    then: dict[str, Any] = {}
    for name in BENCHMARKS:
        if name in skip:
            continue
        loads.append(os.getloadavg()[0])
        if name == "e2e":
            # One run: both workers' drains interleaved with the echo's.
            now[name], then[name] = split_e2e(run_benchmark(name, extra=("--before", str(before))))
        else:
            now[name] = run_benchmark(name)
            then[name] = run_benchmark(name, tree=before)
    instructions = builder_instructions(before) if "builder" not in skip else {}
    loads.append(os.getloadavg()[0])
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
        "commit": commit(),
        "before": before_name,
        "machine": describe_machine(),
        "loadavg": [min(loads), statistics.median(loads), max(loads)],
        "conformance": {"before": conformance(before), "now": conformance(REPO)},
        "tests": {"before": collected(before), "now": collected(REPO)},
        "figures": {"before": then, "now": now},
        "builder_instructions": instructions,
    }


def before_after_table(results: Results) -> str:
    """The Markdown table of a `--before` run: each row before and now."""
    before, now = results["before"], results["commit"]
    lines = [f"| | before (`{before}`) | now (`{now}`) |", "|---|---|---|"]
    cases = results["conformance"]
    lines.append(
        "| conformance cases rendered to the byte | "
        + " | ".join(f"{c['byte_exact']} of {c['cases']}" for c in (cases["before"], cases["now"]))
        + " |"
    )
    tests = results["tests"]
    lines.append(
        "| tests collected (broker and failure suites, tests/integration) | "
        + " | ".join(
            f"{t['tests']:,} ({t['integration']})" for t in (tests["before"], tests["now"])
        )
        + " |"
    )
    figures = results["figures"]
    for name in BENCHMARKS:
        if name not in figures["now"]:
            continue
        rows = zip(
            ROWS[name](figures["before"][name]), ROWS[name](figures["now"][name]), strict=True
        )
        for (target, then, met_then), (_, measured, met) in rows:
            cells = [
                f"{value} ({'met' if ok else '**missed**'})"
                for value, ok in ((then, met_then), (measured, met))
            ]
            lines.append(f"| {target} | {cells[0]} | {cells[1]} |")
    if results.get("builder_instructions"):
        lines.append(builder_instructions_row(results["builder_instructions"]))
    return "\n".join(lines) + "\n"


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
    parser.add_argument("--before", type=Path, help="also measure this earlier checkout")
    parser.add_argument(
        "--before-name", help="what the earlier checkout is, for the table (its commit)"
    )
    args = parser.parse_args()
    results: Results = json.loads(RESULTS_JSON.read_text()) if RESULTS_JSON.exists() else {}
    if args.before is not None:
        ran = before_after(args.before.resolve(), args.before_name or args.before.name, args.skip)
        BEFORE_AFTER_JSON.write_text(json.dumps(ran, indent=2) + "\n")
        BEFORE_AFTER_MD.write_text(header(ran) + "\n" + before_after_table(ran))
        print(BEFORE_AFTER_MD.read_text(), end="")
        # This tree's figures of the run are also the latest figures.
        results = {
            **{key: ran[key] for key in ("date", "commit", "machine", "loadavg")},
            "figures": {**results.get("figures", {}), **ran["figures"]["now"]},
        }
        RESULTS_JSON.write_text(json.dumps(results, indent=2) + "\n")
    elif not args.table_only:
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
