"""How long commands take from exec to exit, against importing the usual libraries.

The yardstick is `python -c "import pydantic, orjson, yaml, structlog"`: what any
Python tool built on these libraries pays before doing anything. Each case runs
`--rounds` times, the cases interleaved round by round so that a busy spell of the
machine lands on all of them; the table shows the median wall time of each case and
the median of its per-round ratio to the yardstick, with issue 16's targets.

    .venv/bin/python bench/bench_startup.py                 # table
    .venv/bin/python bench/bench_startup.py --rounds 41 --json
    .venv/bin/python bench/bench_startup.py --tree /path/to/other/checkout   # its commands

The commands run as users run them: the installed `prompt-worker` script when there
is one (else `python -m worker`), with byte-code caches written (a warm-up round runs
first; an installed package has them too), and the masking database cache of its own
(`PROMPT_WORKER_CACHE_DIR` in a temporary directory, filled by the warm-up). The
`render, no db cache` row switches that cache off: what the first run after an
upgrade pays.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
JOB = REPO / "tests" / "bench_jobs" / "typical_react_job.json"
CONFIG = REPO / "tests" / "bench_jobs" / "worker.yaml"
TEXT = b"pod payments-api restarted\nDB_PASSWORD=q7-Wx-91-zz\n"
BASELINE = "import pydantic, orjson, yaml, structlog"


def prompt_worker(tree: Path) -> list[str]:
    script = Path(sys.executable).with_name("prompt-worker")
    if tree == REPO and script.exists():
        return [str(script)]
    return [sys.executable, "-m", "worker"]  # run in `tree`: its worker package


def cases(text_file: Path, tree: Path) -> dict[str, tuple[list[str], dict[str, str], float | None]]:
    """name -> (command, extra environment, target ratio to the yardstick)."""
    cli = prompt_worker(tree)
    render = [*cli, "render", "--config", str(CONFIG), str(JOB)]
    return {
        "baseline (import 4 libs)": ([sys.executable, "-c", BASELINE], {}, None),
        "python -c pass": ([sys.executable, "-c", "pass"], {}, None),
        "--help": ([*cli, "--help"], {}, 0.5),
        "schema": ([*cli, "schema"], {}, 0.5),
        "asyncapi": ([*cli, "asyncapi"], {}, None),
        "render one job": (render, {}, 1.6),
        "render, no db cache": (render, {"PROMPT_WORKER_CACHE_DIR": ""}, None),
        "mask one text": ([*cli, "mask", "--config", str(CONFIG), str(text_file)], {}, 1.6),
    }


def run_once(command: list[str], env: dict[str, str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(
        command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True
    )
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=21, help="timed runs of each case")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--tree", type=Path, default=REPO, help="checkout whose commands run")
    args = parser.parse_args()
    tree = args.tree.resolve()

    with tempfile.TemporaryDirectory(prefix="bench-startup-") as workdir:
        text_file = Path(workdir) / "text.txt"
        text_file.write_bytes(TEXT)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PROMPT_WORKER_CACHE_DIR"] = str(Path(workdir) / "cache")
        table = cases(text_file, tree)
        for command, extra, _ in table.values():  # warm-up: byte code, database cache
            run_once(command, {**env, **extra}, tree)
        times: dict[str, list[float]] = {name: [] for name in table}
        for _ in range(args.rounds):
            for name, (command, extra, _) in table.items():
                times[name].append(run_once(command, {**env, **extra}, tree))

    baseline = times["baseline (import 4 libs)"]
    results = []
    for name, (_, _, target) in table.items():
        ratio = statistics.median(t / b for t, b in zip(times[name], baseline, strict=True))
        results.append(
            {
                "case": name,
                "median_ms": round(statistics.median(times[name]) * 1000, 1),
                "best_ms": round(min(times[name]) * 1000, 1),
                "ratio_to_baseline": round(ratio, 2),
                "target_ratio": target,
                "met": None if target is None else ratio <= target,
            }
        )
    load = os.getloadavg()
    if args.json:
        print(json.dumps({"rounds": args.rounds, "loadavg": load, "results": results}, indent=2))
        return 0
    print(f"{tree}: {args.rounds} rounds; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"{'case':26} {'median ms':>10} {'best ms':>8} {'× baseline':>11} {'target':>7}")
    for r in results:
        target_text = f"≤{r['target_ratio']}" if r["target_ratio"] else ""
        mark = "" if r["met"] is None else (" met" if r["met"] else " MISSED")
        print(
            f"{r['case']:26} {r['median_ms']:10.1f} {r['best_ms']:8.1f} "
            f"{r['ratio_to_baseline']:11.2f} {target_text:>7}{mark}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
