"""Instructions a typical job costs the builder, counted by valgrind: the same on every
run, so two trees compare to the instruction where timed runs on this shared VM differ
by 10-20% from one minute to the next.

Each count is `Renderer.render(body)` of one typical job (compact, as a producer sends
it), run under `valgrind --tool=callgrind` in a process of its own: the instructions of
`--renders` renders less those of `--warm` renders, divided by the difference, so that
start-up, imports and the first renders' caches are left out. Instructions are not time
(cache misses and branch predictions are not in them), but work added to a job's path
shows in them, and only such work.

    .venv/bin/python bench/bench_instructions.py                      # this tree
    .venv/bin/python bench/bench_instructions.py --tree /tmp/before   # and another
    .venv/bin/python bench/bench_instructions.py --json

Needs valgrind (Debian's `valgrind` package). A tree is a checkout of this repository
(`git archive REV | tar -x -C DIR`); it runs on this checkout's virtual environment.
"""

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
JOBS = ("react", "chat")
COLLECTED = re.compile(r"Collected : (\d+)")

# The child: renders one job `count` times with the tree's own worker package.
CHILD = """
import sys
tree, job, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, tree)
from pathlib import Path
import orjson
from worker.render.config import load_config
from worker.render.renderer import Renderer
jobs = Path(tree) / "tests" / "bench_jobs"
renderer = Renderer(load_config(jobs / "worker.yaml"))
body = orjson.dumps(orjson.loads((jobs / f"typical_{job}_job.json").read_bytes()))
assert renderer.render(body).ok
for _ in range(count):
    renderer.render(body)
"""


def instructions(tree: Path, job: str, count: int) -> int:
    """Instructions of a process that renders `job` `count` times in `tree`."""
    run = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            "-c",
            CHILD,
            str(tree),
            job,
            str(count),
        ],
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    )
    found = COLLECTED.search(run.stderr)
    if found is None:
        raise SystemExit(f"valgrind printed no instruction count:\n{run.stderr[-2000:]}")
    return int(found.group(1))


def per_job(tree: Path, job: str, warm: int, renders: int) -> int:
    return (instructions(tree, job, renders) - instructions(tree, job, warm)) // (renders - warm)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--tree", type=Path, action="append", default=[], help="another checkout to count"
    )
    parser.add_argument("--warm", type=int, default=20, help="renders of the shorter run")
    parser.add_argument("--renders", type=int, default=220, help="renders of the longer run")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    if args.renders <= args.warm:
        parser.error("--renders must be more than --warm")
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not installed (apt-get install valgrind)")
    trees = [REPO, *(tree.resolve() for tree in args.tree)]
    results = [
        {
            "tree": str(tree),
            "job": job,
            "instructions_per_job": per_job(tree, job, args.warm, args.renders),
        }
        for tree in trees
        for job in JOBS
    ]
    if args.json:
        print(json.dumps({"warm": args.warm, "renders": args.renders, "results": results}))
        return 0
    print("| tree | job | instructions a job |\n|---|---|---|")
    for result in results:
        print(f"| {result['tree']} | {result['job']} | {result['instructions_per_job']:,} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
