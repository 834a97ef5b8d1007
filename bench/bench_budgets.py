"""Context-window budgets (docs/BUDGETS.md): prefix stability, budget use, cost.

Four measurements, each in one sitting so that ratios compare like with like:

1. **Stable prefixes.** A react investigation grows one event at a time, from well under
   its budget to `--renders` renders past it. For each render after the first trimmed
   one: the share of the prompt (characters of all messages, in order) that is a prefix
   shared with the render before, i.e. what a provider's prompt cache can reuse. Ours
   (block cuts) next to a naive sliding window that leaves out the oldest events one at
   a time, just enough to fit (the same trimmer with one-item blocks).
2. **Budget use.** prompt_tokens / max_prompt_tokens of the trimmed renders.
3. **Far under budget.** A typical react job with a budget far above its size, with
   cl100k_base: the render time next to the same job without a budget, and how many
   characters were tokenized (none: its size proves the fit).
4. **A 1 MB investigation to 100k tokens** with cl100k_base: the render time, how many
   characters were tokenized against the job's size, the time to tokenize the job's
   events once (what a count-everything trimmer would pay at the least) and the time to
   tokenize the reply's prompt once (what any exact count of it costs at the least),
   and the render counting each candidate prompt whole (as before pieces.py), the
   cases in turn; wall and CPU (process) time, the latter less moved by other load.

    .venv/bin/python bench/bench_budgets.py
    .venv/bin/python bench/bench_budgets.py --json
"""

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from schemas.budget import Budget  # noqa: E402
from schemas.job import Job  # noqa: E402
from worker.families import FAMILIES  # noqa: E402
from worker.render.budget import Fitted, fit_to_budget, tokenizers  # noqa: E402
from worker.render.budget.trim import BLOCK_SHARE  # noqa: E402
from worker.render.renderer import Renderer  # noqa: E402

BENCH_JOBS = REPO / "tests" / "bench_jobs"
WORDS = [
    "pod",
    "api-7f9c",
    "restarted",
    "OOMKilled",
    "memory",
    "limit",
    "512Mi",
    "node",
    "ip-10-0-3-17",
    "kubelet",
    "readiness",
    "probe",
    "failed",
    "status",
    "503",
    "latency",
    "p99",
    "1.8s",
    "error",
    "connection",
    "refused",
    "deployment",
    "rollout",
    "replica",
    "set",
    "namespace",
    "prod",
    "trace",
    "id",
    "4f2a9c",
]


def log_text(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    size = 0
    while size < chars:
        line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14)))
        out.append(line)
        size += len(line) + 1
    return "\n".join(out)[:chars]


def session_events(count: int, seed: int = 7) -> list[dict[str, str]]:
    rng = random.Random(seed)
    types = ["llm_thinking", "tool_call", "tool_result", "tool_result", "llm_response"]
    events = []
    for n in range(count):
        event_type = types[n % len(types)]
        size = rng.randint(800, 4000) if event_type == "tool_result" else rng.randint(150, 600)
        events.append({"event_type": event_type, "content": f"[{n}] " + log_text(rng, size)})
    return events


def base_job() -> dict[str, Any]:
    job: dict[str, Any] = json.loads((BENCH_JOBS / "typical_react_job.json").read_text())
    job["stage"].pop("previous_stage_context", None)
    return job


class Builds:
    """Renders a job dict through the renderer's own builder and contributors."""

    def __init__(self) -> None:
        self.renderer = Renderer()

    def __call__(self, job: Job) -> list[dict[str, str]]:
        result = FAMILIES[job.kind].build(job, self.renderer.context)
        return self.renderer.contributors.apply(job, result.messages)


def shared_prefix(a: list[dict[str, str]], b: list[dict[str, str]]) -> float:
    """Share of `b` (all messages, in order) that is a prefix of `a`."""
    left = "\x00".join(m["role"] + "\x00" + m["content"] for m in a)
    right = "\x00".join(m["role"] + "\x00" + m["content"] for m in b)
    same = next(
        (i for i, (x, y) in enumerate(zip(left, right, strict=False)) if x != y),
        min(len(left), len(right)),
    )
    return same / len(right)


def grow(builds: Builds, renders: int, limit: int, block_share: int) -> dict[str, Any]:
    events = session_events(400)
    template = base_job()
    budget = Budget(max_prompt_tokens=limit, tokenizer="cl100k_base")
    previous: list[dict[str, str]] | None = None
    fractions: list[float] = []
    usage: list[float] = []
    breaks = 0
    trimmed_renders = 0
    for count in range(1, len(events) + 1):
        template["stage"]["previous_stage_events"] = events[:count]
        job = Job.model_validate({**template, "job_id": f"grow-{count}"})
        fitted = fit_to_budget(job, budget, builds(job), builds, block_share=block_share)
        assert isinstance(fitted, Fitted)
        if fitted.trimmed:
            trimmed_renders += 1
            usage.append(fitted.prompt_tokens / limit)
            if previous is not None and trimmed_renders > 1:
                fraction = shared_prefix(previous, fitted.messages)
                fractions.append(fraction)
                if fraction < 0.5:
                    breaks += 1
        previous = fitted.messages
        if trimmed_renders > renders:
            break
    return {
        "renders_past_budget": len(fractions),
        "mean_shared_prefix": round(statistics.fmean(fractions), 3),
        "median_shared_prefix": round(statistics.median(fractions), 3),
        "renders_with_prefix_under_half": breaks,
        "mean_budget_use": round(statistics.fmean(usage), 3),
        "min_budget_use": round(min(usage), 3),
    }


class CountingTokenizer:
    """Wraps a tokenizer and counts the characters it is asked to tokenize; with
    `whole`, it claims no line seams, so prompts are counted whole (as the trimmer did
    before worker/render/budget/pieces.py)."""

    def __init__(self, inner: tokenizers.Tokenizer, whole: bool = False) -> None:
        self.inner = inner
        self.name = inner.name
        self.line_seams = inner.line_seams and not whole
        self.chars = 0

    def count(self, text: str) -> int:
        self.chars += len(text)
        return self.inner.count(text)

    def count_many(self, texts: Any) -> list[int]:
        self.chars += sum(len(t) for t in texts)
        return self.inner.count_many(texts)

    def at_most(self, text: str, tight: bool = False) -> int:
        return self.inner.at_most(text, tight)


def timed(func: Any, repeat: int) -> float:
    """Median seconds of `repeat` calls."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        func()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def interleaved(cases: dict[str, Any], repeat: int) -> dict[str, dict[str, float]]:
    """Median wall and CPU milliseconds of each case, the cases run in turn `repeat`
    times, so that a machine's changing load weighs on all of them alike."""
    wall: dict[str, list[float]] = {name: [] for name in cases}
    cpu: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeat):
        for name, func in cases.items():
            started, started_cpu = time.perf_counter(), time.process_time()
            func()
            cpu[name].append(time.process_time() - started_cpu)
            wall[name].append(time.perf_counter() - started)
    return {
        name: {
            "wall_ms": round(statistics.median(wall[name]) * 1000, 1),
            "cpu_ms": round(statistics.median(cpu[name]) * 1000, 1),
        }
        for name in cases
    }


def with_counting(func: Any, whole: bool = False) -> int:
    """Characters tokenized by cl100k_base while `func` runs."""
    real = tokenizers.get("cl100k_base")
    counting = CountingTokenizer(real, whole)
    tokenizers._loaded["cl100k_base"] = counting
    try:
        func()
    finally:
        tokenizers._loaded["cl100k_base"] = real
    return counting.chars


def far_under(repeat: int) -> dict[str, Any]:
    renderer = Renderer()
    job = base_job()
    plain = orjson.dumps(job)
    # The budget before `tools`: a catalogue must stay the body's last member for the
    # decoder to skip parsing it (docs/CONTRACT.md §2).
    budgeted = orjson.dumps(
        {"budget": {"max_prompt_tokens": 1_000_000, "tokenizer": "cl100k_base"}, **job}
    )
    renderer.render(budgeted)  # loads the vocabulary
    chars = with_counting(lambda: renderer.render(budgeted))
    return {
        "job_bytes": len(plain),
        "render_ms_without_budget": round(timed(lambda: renderer.render(plain), repeat) * 1000, 3),
        "render_ms_with_budget": round(timed(lambda: renderer.render(budgeted), repeat) * 1000, 3),
        "chars_tokenized": chars,
    }


def megabyte(repeat: int) -> dict[str, Any]:
    renderer = Renderer()
    job = base_job()
    events = []
    size = 0
    for event in session_events(2000, seed=11):
        events.append(event)
        size += len(event["content"])
        if size >= 1_000_000:
            break
    job["stage"]["previous_stage_events"] = events
    body = orjson.dumps(
        {"budget": {"max_prompt_tokens": 100_000, "tokenizer": "cl100k_base"}, **job}
    )
    reply = orjson.loads(renderer.render(body).body)
    budget = reply["meta"]["budget"]
    prompt = "".join(m["content"] for m in reply["messages"])
    chars = with_counting(lambda: renderer.render(body))
    chars_whole = with_counting(lambda: renderer.render(body), whole=True)
    cl100k = tokenizers.get("cl100k_base")
    counting_whole = CountingTokenizer(cl100k, whole=True)
    events_text = "".join(e["content"] for e in events)

    def render_counting_whole() -> None:
        tokenizers._loaded["cl100k_base"] = counting_whole
        try:
            renderer.render(body)
        finally:
            tokenizers._loaded["cl100k_base"] = cl100k

    times = interleaved(
        {
            "render": lambda: renderer.render(body),
            "render_counting_prompts_whole": render_counting_whole,
            "tokenize_reply_prompt_once": lambda: cl100k.count(prompt),
            "tokenize_job_events_once": lambda: cl100k.count(events_text),
        },
        repeat,
    )
    return {
        "job_bytes": len(body),
        "events": len(events),
        "prompt_tokens": budget["prompt_tokens"],
        "events_left_out": budget["elisions"][0]["items"],
        "prompt_chars": len(prompt),
        "chars_tokenized": chars,
        "chars_tokenized_counting_prompts_whole": chars_whole,
        **{f"{name}_{unit}": value for name, v in times.items() for unit, value in v.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--renders", type=int, default=80, help="renders past the budget")
    parser.add_argument("--budget", type=int, default=16_000, help="max_prompt_tokens")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    builds = Builds()
    results = {
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "growing_session": {
            "budget": args.budget,
            "ours": grow(builds, args.renders, args.budget, BLOCK_SHARE),
            # One-item blocks: the oldest events go one at a time, just enough to fit.
            "naive_sliding_window": grow(builds, args.renders, args.budget, 10**9),
        },
        "far_under_budget": far_under(args.repeat * 30),
        "one_megabyte_to_100k_tokens": megabyte(args.repeat * 3),
    }
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"load average {results['load_average']}")
    for name, value in results.items():
        if isinstance(value, dict):
            print(f"\n{name}")
            for key, item in value.items():
                print(f"  {key}: {item}")


if __name__ == "__main__":
    main()
