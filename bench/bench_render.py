"""`prompt-worker render` over a JSON Lines file against the same renderer in-process.

The input is `--jobs` copies of the typical ReAct job (tests/bench_jobs), each with its
own job_id, one a line. Each round times, on one pinned core:

* in-process: `Renderer.render` over every line, as bench/bench_builder.py does
  (renderer built and warmed up beforehand, start-up excluded);
* the command: `prompt-worker render --config ... jobs.jsonl > /dev/null`, start-up
  included, with its CPU time (user + system, from the kernel's child accounting),
  twice: on the same single core (one usable core: one process), and with
  `--workers N` on all N usable cores (what its default does on a file this size).

The rounds alternate the two; the table shows medians and the median per-round ratio
of the command's rate to the in-process rate (issue 16's target: at least 0.8). On a
busy machine the CPU-time ratio is the steadier of the two.

    .venv/bin/python bench/bench_render.py
    .venv/bin/python bench/bench_render.py --jobs 10000 --rounds 5 --json
    .venv/bin/python bench/bench_render.py --tree /path/to/other/checkout   # its command
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from worker.render.config import load_config  # noqa: E402
from worker.render.renderer import Renderer  # noqa: E402

JOB = REPO / "tests" / "bench_jobs" / "typical_react_job.json"
CONFIG = REPO / "tests" / "bench_jobs" / "worker.yaml"


def write_jobs(path: Path, count: int) -> list[bytes]:
    job = orjson.loads(JOB.read_bytes())
    lines = []
    for n in range(count):
        job["job_id"] = f"bench-render-{n:06d}"
        lines.append(orjson.dumps(job))
    path.write_bytes(b"\n".join(lines) + b"\n")
    return lines


def in_process(renderer: Renderer, lines: list[bytes]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) to render every line."""
    cpu, wall = time.process_time(), time.perf_counter()
    for line in lines:
        renderer.render(line)
    return time.perf_counter() - wall, time.process_time() - cpu


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def command(
    argv: list[str], cwd: Path, env: dict[str, str], cores: set[int]
) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run of the command on `cores`."""
    cpu, wall = children_cpu(), time.perf_counter()
    subprocess.run(
        argv,
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        check=False,
        preexec_fn=lambda: os.sched_setaffinity(0, cores),
    )
    return time.perf_counter() - wall, children_cpu() - cpu


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs in the input file")
    parser.add_argument("--rounds", type=int, default=5, help="alternated rounds")
    parser.add_argument("--tree", type=Path, default=REPO, help="checkout whose command runs")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()

    every_core = os.sched_getaffinity(0)
    core = sorted(every_core)[0]
    os.sched_setaffinity(0, {core})
    tree = args.tree.resolve()
    python = tree / ".venv" / "bin" / "python"
    argv = [str(python if python.exists() else sys.executable), "-m", "worker", "render"]
    renderer = Renderer(load_config(CONFIG))
    with tempfile.TemporaryDirectory(prefix="bench-render-") as workdir:
        jobs = Path(workdir) / "jobs.jsonl"
        lines = write_jobs(jobs, args.jobs)
        argv += ["--config", str(CONFIG), str(jobs)]
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PROMPT_WORKER_CACHE_DIR"] = str(Path(workdir) / "cache")
        for line in lines[:500]:
            renderer.render(line)
        # --workers exists in this tree only: another tree runs its default twice.
        parallel = [*argv, "--workers", str(len(every_core))] if tree == REPO else argv
        command(argv, tree, env, {core})  # warm-up: byte code, masking database cache
        rounds = []
        for _ in range(args.rounds):
            inside = in_process(renderer, lines)
            outside = command(argv, tree, env, {core})
            everywhere = command(parallel, tree, env, every_core)
            rounds.append((inside, outside, everywhere))

    job_count: int = args.jobs

    def rate(seconds: float) -> float:
        return job_count / seconds

    result = {
        "jobs": args.jobs,
        "tree": str(tree),
        "cores": len(every_core),
        "in_process_jobs_per_s": round(statistics.median(rate(i[0]) for i, _, _ in rounds)),
        "in_process_cpu_us_per_job": round(
            statistics.median(i[1] for i, _, _ in rounds) / args.jobs * 1e6, 1
        ),
        "command_jobs_per_s": round(statistics.median(rate(o[0]) for _, o, _ in rounds)),
        "command_cpu_us_per_job": round(
            statistics.median(o[1] for _, o, _ in rounds) / args.jobs * 1e6, 1
        ),
        "ratio_wall": round(statistics.median(i[0] / o[0] for i, o, _ in rounds), 3),
        "ratio_cpu": round(statistics.median(i[1] / o[1] for i, o, _ in rounds), 3),
        "all_cores_jobs_per_s": round(statistics.median(rate(e[0]) for _, _, e in rounds)),
        "all_cores_ratio_wall": round(statistics.median(i[0] / e[0] for i, _, e in rounds), 3),
        "target_ratio": 0.8,
        "rounds": [
            {
                "in_process_s": [round(x, 3) for x in i],
                "command_one_core_s": [round(x, 3) for x in o],
                "command_all_cores_s": [round(x, 3) for x in e],
            }
            for i, o, e in rounds
        ],
        "loadavg": os.getloadavg(),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    load = result["loadavg"]
    print(f"{args.jobs:,} typical ReAct jobs, core {core}, {args.rounds} rounds; load {load}")
    print(
        f"in-process: {result['in_process_jobs_per_s']:,} jobs/s, "
        f"{result['in_process_cpu_us_per_job']} µs CPU a job"
    )
    print(
        f"command, one core: {result['command_jobs_per_s']:,} jobs/s, "
        f"{result['command_cpu_us_per_job']} µs CPU a job (start-up included)"
    )
    print(
        f"command / in-process: {result['ratio_wall']:.2f} by wall time, "
        f"{result['ratio_cpu']:.2f} by CPU time (target ≥ 0.8)"
    )
    print(
        f"command, --workers {result['cores']} on all cores: "
        f"{result['all_cores_jobs_per_s']:,} jobs/s, "
        f"{result['all_cores_ratio_wall']:.2f} of the in-process rate by wall time"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
