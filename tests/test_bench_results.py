"""bench/results.py's tables, from figures written out by hand (the benchmarks
themselves are not run by the suite)."""

import importlib.util
from types import ModuleType
from typing import Any

from tests.data import REPO


def load_results() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_results", REPO / "bench" / "results.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def builder(react_per_s: int, react_us: float) -> dict[str, Any]:
    return {
        "results": [{"case": "react (typical)", "jobs_per_s": react_per_s, "median_us": react_us}],
        "masking_overhead": [],
    }


def rerender(one: float, two: float) -> list[dict[str, Any]]:
    return [{"name": "local-1", "jobs_per_s": one}, {"name": "local-2", "jobs_per_s": two}]


def test_the_before_and_after_table_shows_each_row_for_both_trees() -> None:
    results = load_results()
    ran = {
        "commit": "bbbbbbb",
        "before": "aaaaaaa",
        "conformance": {
            "before": {"cases": 140, "byte_exact": 139},
            "now": {"cases": 140, "byte_exact": 140},
        },
        "tests": {
            "before": {"tests": 4390, "integration": 80},
            "now": {"tests": 4594, "integration": 104},
        },
        "figures": {
            "before": {"builder": builder(9000, 111.1), "rerender": rerender(10000, 18000)},
            "now": {"builder": builder(12000, 83.3), "rerender": rerender(10000, 16000)},
        },
        "builder_instructions": {
            "before": {"react": 668_604, "chat": 2_411_140},
            "now": {"react": 663_302, "chat": 2_532_697},
        },
    }
    assert results.before_after_table(ran).splitlines() == [
        "| | before (`aaaaaaa`) | now (`bbbbbbb`) |",
        "|---|---|---|",
        "| conformance cases rendered to the byte | 139 of 140 | 140 of 140 |",
        "| tests collected (broker and failure suites, tests/integration) | 4,390 (80) | 4,594 (104) |",
        "| builder, react job ≥ 10,000 jobs/s on one core | 9,000 jobs/s (111.1 µs) (**missed**)"
        " | 12,000 jobs/s (83.3 µs) (met) |",
        "| rerender `--local`, 2 workers ≥ 1.7× one | 1.80× (10,000 and 18,000 jobs/s) (met)"
        " | 1.60× (10,000 and 16,000 jobs/s) (**missed**) |",
        "| builder, instructions a typical job (valgrind) | react 668,604, chat 2,411,140"
        " | react 663,302 (0.992×), chat 2,532,697 (1.050×) |",
    ]


def test_an_e2e_run_with_the_tree_before_splits_into_two_runs_sharing_the_echo() -> None:
    results = load_results()
    echo = {"worker": "echo", "processes": 1, "cpu_ms_per_job": 0.4}
    before = {"worker": "before", "processes": 1, "cpu_ms_per_job": 0.3}
    render = {"worker": "render", "processes": 1, "cpu_ms_per_job": 0.32}
    go = {"worker": "go", "processes": 1, "cpu_ms_per_job": 0.1}
    now, then = results.split_e2e([echo, before, render, go])
    assert now == [echo, render]
    assert then == [echo, {"worker": "render", "processes": 1, "cpu_ms_per_job": 0.3}]
