#!/usr/bin/env python3
"""Size, memory and time of the drift page on a large run (docs/PERFORMANCE.md,
"Batch re-rendering").

    .venv/bin/python scripts/bench-drift-page.py                 # 1,000,000 lines
    .venv/bin/python scripts/bench-drift-page.py --lines 100000  # a quicker look
    .venv/bin/python scripts/bench-drift-page.py --skip-rerender # page only, again

Input: `--lines` lines cycling through the conformance files, each with the meta the
worker sent (so the page also reads every input line's template version), where every
10th job's prior messages differ from what renders now: one old template line in the
first message (the same change in every kind: a template edit), and on every 100th
line also a line only that job had (10,000 distinct changes at 1,000,000 lines, beyond
what the page lists). One line in 10,000 is not JSON. Then, as real subprocesses:

  1. `prompt-worker rerender IN --out OUT --html PAGE --workers 2 --diff-limit 0`
  2. `prompt-worker report IN OUT --html PAGE2` (the page alone, built later)
  3. the page opened in headless Chromium: time until drawn, DOM size, JS heap, and
     the time to open a change and to scroll the list to its end.

Peak memory is sampled every 0.1 s over the process tree (RSS summed, so pages shared
by forked processes count once per process; PSS shares them out), as in
bench/bench_rerender.py. Files go to `--workdir` (default /tmp/bench-drift-page).
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The process-tree memory sampling of the rerender benchmark.
sys.path.insert(0, str(REPO / "bench"))
from bench_rerender import _memory_kb, _tree  # noqa: E402

CONFORMANCE = REPO / "tests" / "conformance"
PYTHON = sys.executable
CHROMIUM = os.environ.get("PROMPT_WORKER_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
OLD_LINE = "An instruction the old template had."


def make_input(path: Path, count: int) -> None:
    sys.path.insert(0, str(REPO))
    from worker.families import FAMILIES

    cases = []
    for name in ("cases.jsonl", "families.jsonl"):
        cases += [json.loads(line) for line in (CONFORMANCE / name).read_text().splitlines()]
    tmp = path.with_suffix(".tmp")
    with tmp.open("w") as out:
        for index in range(count):
            if index % 10_000 == 9_999:
                out.write("{not json\n")
                continue
            case = cases[index % len(cases)]
            family = FAMILIES[case["job"]["kind"]]
            meta = {"family": family.name, "template_version": family.template_version}
            job = {**case["job"], "job_id": f"{case['job']['job_id']}-{index}"}
            messages = case["expected_messages"]
            if index % 10 == 0:
                messages = [dict(m) for m in messages]
                messages[0]["content"] += "\n" + OLD_LINE
                if index % 100 == 0:
                    messages[-1]["content"] += f"\nA line only job {index} had."
            out.write(json.dumps({"job": job, "expected_messages": messages, "meta": meta}))
            out.write("\n")
    tmp.rename(path)


def measure(name: str, command: list[str]) -> dict[str, object]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, text=True)
    peak_rss = peak_pss = 0
    while process.poll() is None:
        sizes = [_memory_kb(pid) for pid in _tree(process.pid)]
        peak_rss = max(peak_rss, sum(rss for rss, _ in sizes))
        peak_pss = max(peak_pss, sum(pss for _, pss in sizes))
        time.sleep(0.1)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    output = process.stdout.read() if process.stdout else ""
    return {
        "run": name,
        "exit": process.returncode,
        "wall_s": round(time.monotonic() - started, 1),
        "cpu_s": round(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, 1),
        "peak_rss_mb": round(peak_rss / 1024, 1),
        "peak_pss_mb": round(peak_pss / 1024, 1),
        "stdout_tail": output.strip().splitlines()[-3:],
    }


def in_browser(page_path: Path) -> dict[str, object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright, tempfile.TemporaryDirectory() as profile:
        context = playwright.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1440, "height": 900},
        )  # fmt: skip
        page = context.new_page()
        started = time.monotonic()
        page.goto(page_path.as_uri())
        page.wait_for_selector("body[data-ready='1']", timeout=120_000)
        ready = time.monotonic() - started
        nodes = page.evaluate("document.getElementsByTagName('*').length")
        rows = page.locator("#list .row").count()
        heap = page.evaluate("performance.memory ? performance.memory.usedJSHeapSize : 0")
        keys = page.eval_on_selector_all("#list .row", "r => r.map(e => e.dataset.key)")
        started = time.monotonic()
        page.click(f"#list .row[data-key='{keys[min(3, len(keys) - 1)]}']")
        page.wait_for_selector("#detail h2")
        open_change = time.monotonic() - started
        started = time.monotonic()
        page.eval_on_selector("#list", "l => { l.scrollTop = l.scrollHeight; }")
        page.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
        scroll = time.monotonic() - started
        started = time.monotonic()
        page.fill("#search", "case-1-17-")
        page.press("#search", "Enter")
        search = time.monotonic() - started
        context.close()
    return {
        "ready_s": round(ready, 2),
        "dom_elements": nodes,
        "list_rows_drawn": rows,
        "js_heap_mb": round(heap / 2**20, 1),
        "open_change_s": round(open_change, 3),
        "scroll_to_end_s": round(scroll, 3),
        "search_s": round(search, 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench-drift-page"))
    parser.add_argument("--skip-rerender", action="store_true", help="reuse OUT from before")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    source = args.workdir / f"in-{args.lines}.jsonl"
    output = args.workdir / f"out-{args.lines}.jsonl"
    page, later = args.workdir / f"page-{args.lines}.html", args.workdir / "later.html"
    if not source.exists():
        make_input(source, args.lines)
    config = str(CONFORMANCE / "worker.yaml")
    results: list[dict[str, object]] = []
    if not args.skip_rerender:
        results.append(measure("rerender --html", [
            PYTHON, "-m", "worker", "rerender", str(source), "--out", str(output),
            "--html", str(page), "--config", config, "--workers", "2", "--diff-limit", "0",
            "--progress", "off",
        ]))  # fmt: skip
    results.append(measure("report", [
        PYTHON, "-m", "worker", "report", str(source), str(output), "--html", str(later),
    ]))  # fmt: skip
    for result in results:
        print(json.dumps(result), flush=True)
    print(
        json.dumps(
            {
                "input_mb": round(source.stat().st_size / 2**20, 1),
                "output_mb": round(output.stat().st_size / 2**20, 1),
                "page_mb": round(later.stat().st_size / 2**20, 2),
                "same_page": (not page.exists()) or page.read_bytes() == later.read_bytes(),
            }
        ),
        flush=True,
    )
    print(json.dumps({"browser": in_browser(later)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
