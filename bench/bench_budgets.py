"""Context-window budgets (docs/BUDGETS.md): prefix stability, cache breakpoints, cost.

Five measurements, each in one sitting so that ratios compare like with like:

1. **Stable prefixes.** A react investigation grows one event at a time, from well under
   its budget to `--renders` renders past it. For each render after the first trimmed
   one: the share of the prompt (characters of all messages, in order) that is a prefix
   shared with the render before, i.e. what a provider's prompt cache can reuse. The
   `"cache"` policy (steps), `"tight"` (blocks of an eighth of the budget) and a naive
   sliding window that leaves out the oldest events one at a time, just enough to fit
   (`"tight"` with one-item blocks).
2. **Budget use.** prompt_tokens / max_prompt_tokens of the trimmed renders.
3. **Far under budget, and no budget.** A typical react job: the render time without a
   budget and with one far above its size (cl100k_base), side by side, and the cost of
   the cache breakpoints a budget-less reply carries (the family's growth point and the
   estimate's breakpoints), timed alone against the render.
4. **A 1 MB investigation to 100k tokens**, with cl100k_base and with o200k_base: the
   render time (under `"cache"`, the default, and `"tight"`), how many characters were tokenized against the job's size, the time to
   tokenize the reply's prompt once (what any exact count of it costs at the least), the
   render counting each candidate prompt whole (as before pieces.py), and the render
   counting with bpe-openai's Rust BPE instead of tiktoken (the choice of counting
   library), the cases in turn; wall and CPU (process) time, the latter less
   moved by other load; and the cacheable share of the reply (meta.cache).
5. **Growing sessions by shape**: the sessions of tests/render/budget/sessions.py (chats
   with and without history, a chat whose history outgrows its budget, stages with
   previous-stage events, small and huge, a growing chain context, the legacy family's
   growing ReAct history, iterations and chain context; one item a render) and the
   trial of issue 45 (chats of 30 to 90 events and a stage of 20 to 70, two events a
   render), each budgeted at 25%, 45% and 70% of its largest render by cl100k_base,
   under `"cache"` and `"tight"`: what a caller pays for, over all the session's calls
   (sessions.figures): the prefix stability (per message, the mean over every
   consecutive pair, cuts included, of the share of the earlier render's message the
   later one repeats; the least message), the cached share of the prompt tokens (tokens
   before the last breakpoint of the previous call that the call repeats, over all prompt
   tokens, the first call's included), the budget used (mean over the trimmed renders,
   least at a render that starts a new cut, most), the renders that start a new cut, and
   breakpoints not kept where CONTRACT.md §11.1 promises them (none, or the promise is
   broken).

    .venv/bin/python bench/bench_budgets.py
    .venv/bin/python bench/bench_budgets.py --json
    .venv/bin/python bench/bench_budgets.py --only shapes --shapes chat,stage_events
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

from schemas.budget import Budget, Policy  # noqa: E402
from schemas.job import Job  # noqa: E402
from tests.render.budget.sessions import SHAPES, SHARES, TRIAL_SHAPES, figures, rendered  # noqa: E402
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


def grow(
    builds: Builds, renders: int, limit: int, block_share: int, policy: Policy
) -> dict[str, Any]:
    events = session_events(400)
    template = base_job()
    budget = Budget(max_prompt_tokens=limit, tokenizer="cl100k_base", policy=policy)
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


def grow_shapes(shares: tuple[float, ...], names: set[str] | None) -> dict[str, Any]:
    """Each shape of growing session at each share of its largest render, under either
    policy, by cl100k_base: sessions.figures of its replies."""
    renderer = Renderer()
    results: dict[str, Any] = {}
    for shape in (*SHAPES, *TRIAL_SHAPES):
        if names is not None and shape.name not in names:
            continue
        for share in shares:
            row: dict[str, Any] = {}
            for policy in ("cache", "tight"):
                replies, limit = rendered(renderer, shape, share, "cl100k_base", policy)
                row[policy] = figures(replies, limit).as_dict()
            row["budget"] = limit
            results[f"{shape.name} at {share:.0%}"] = row
    return results


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
            "wall_ms": round(statistics.median(wall[name]) * 1000, 3),
            "cpu_ms": round(statistics.median(cpu[name]) * 1000, 3),
        }
        for name in cases
    }


def with_counting(func: Any, whole: bool = False, name: str = "cl100k_base") -> int:
    """Characters tokenized by the tokenizer `name` while `func` runs."""
    real = tokenizers.get(name)
    counting = CountingTokenizer(real, whole)
    tokenizers._loaded[name] = counting
    try:
        func()
    finally:
        tokenizers._loaded[name] = real
    return counting.chars


class BpeOpenAI:
    """An encoding counted by bpe-openai's Rust BPE, through its public tiktoken-like API:
    the other candidate of docs/BUDGETS.md, "Sizing a budget per model". Its API refuses a
    text of 1,000,000 characters or more and one of more than 200,000 tokens."""

    def __init__(self, inner: tokenizers.Tokenizer) -> None:
        import bpe_openai

        self.encoding = bpe_openai.get_encoding(inner.name)
        self.inner = inner
        self.name = inner.name
        self.line_seams = inner.line_seams

    def count(self, text: str) -> int:
        return len(self.encoding.encode_ordinary(text))

    def count_many(self, texts: Any) -> list[int]:
        return [len(self.encoding.encode_ordinary(text)) for text in texts]

    def at_most(self, text: str, tight: bool = False) -> int:
        return self.inner.at_most(text, tight)


def far_under(repeat: int) -> dict[str, Any]:
    """A typical job without a budget and far under one: render times, side by side, and
    what the cache breakpoints of a budget-less reply cost inside its render."""
    from worker.render import renderer as renderer_module
    from worker.render.cache import estimate_cache_meta

    def no_breakpoints(*args: Any, **kwargs: Any) -> dict[str, Any]:
        return {}

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
    parsed = Job.model_validate(job)
    family = FAMILIES[parsed.kind]
    messages = Builds()(parsed)

    def breakpoints() -> None:
        # What a reply without a budget computes: the family's growth point, then the
        # estimate's breakpoints (renderer.render_job).
        estimate_cache_meta(messages, family.stable_end(parsed, messages))

    names = vars(renderer_module)  # the renderer module's own names

    def render_without_breakpoints() -> None:
        # The renderer as it was before meta.cache: the same render, its breakpoints
        # swapped for an empty object (the renderer's own name, restored after).
        names["estimate_cache_meta"] = no_breakpoints
        try:
            renderer.render(plain)
        finally:
            names["estimate_cache_meta"] = estimate_cache_meta

    times = interleaved(
        {
            # The budgeted render first: the case after it pays for its garbage.
            "render_with_budget": lambda: renderer.render(budgeted),
            "render_without_budget": lambda: renderer.render(plain),
            "render_without_budget_nor_breakpoints": render_without_breakpoints,
            # The same case again: how much the order of the cases alone moves a time.
            "render_without_budget_again": lambda: renderer.render(plain),
            "cache_breakpoints_without_budget": breakpoints,
        },
        repeat,
    )
    render_us = times["render_without_budget_again"]["cpu_ms"] * 1000
    breakpoints_us = timed(breakpoints, repeat * 10) * 1_000_000
    return {
        "job_bytes": len(plain),
        **{f"{name}_{unit}": value for name, v in times.items() for unit, value in v.items()},
        "cache_breakpoints_us": round(breakpoints_us, 2),
        "cache_breakpoints_share_of_render": round(breakpoints_us / render_us, 4)
        if render_us
        else None,
        "chars_tokenized_with_budget": chars,
    }


def megabyte(repeat: int, name: str) -> dict[str, Any]:
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
    body = orjson.dumps({"budget": {"max_prompt_tokens": 100_000, "tokenizer": name}, **job})
    tight_budget = {"max_prompt_tokens": 100_000, "tokenizer": name, "policy": "tight"}
    tight = orjson.dumps({"budget": tight_budget, **job})
    reply = orjson.loads(renderer.render(body).body)
    budget = reply["meta"]["budget"]
    cache = reply["meta"]["cache"]
    prompt = "".join(m["content"] for m in reply["messages"])
    chars = with_counting(lambda: renderer.render(body), name=name)
    chars_whole = with_counting(lambda: renderer.render(body), whole=True, name=name)
    exact = tokenizers.get(name)
    counting_whole = CountingTokenizer(exact, whole=True)
    events_text = "".join(e["content"] for e in events)

    def render_with(tokenizer: Any) -> Any:
        def run() -> None:
            tokenizers._loaded[name] = tokenizer
            try:
                renderer.render(body)
            finally:
                tokenizers._loaded[name] = exact

        return run

    cases: dict[str, Any] = {
        "render": lambda: renderer.render(body),
        "render_tight": lambda: renderer.render(tight),
        "render_counting_prompts_whole": render_with(counting_whole),
        "tokenize_reply_prompt_once": lambda: exact.count(prompt),
    }
    bpe = BpeOpenAI(exact)
    cases["render_counting_with_bpe_openai"] = render_with(bpe)
    cases["tokenize_reply_prompt_once_bpe_openai"] = lambda: bpe.count(prompt)
    if name == "cl100k_base":
        cases["tokenize_job_events_once"] = lambda: exact.count(events_text)
    times = interleaved(cases, repeat)
    return {
        "job_bytes": len(body),
        "events": len(events),
        "prompt_tokens": budget["prompt_tokens"],
        "events_left_out": budget["elisions"][0]["items"],
        "cacheable_share": round(cache["stable_tokens"] / cache["prompt_tokens"], 3),
        "prompt_chars": len(prompt),
        "chars_tokenized": chars,
        "chars_tokenized_counting_prompts_whole": chars_whole,
        **{f"{case}_{unit}": value for case, v in times.items() for unit, value in v.items()},
    }


PARTS = ("growing_session", "far_under_budget", "one_megabyte_to_100k_tokens", "shapes")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--renders", type=int, default=80, help="renders past the budget")
    parser.add_argument("--budget", type=int, default=16_000, help="max_prompt_tokens")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument(
        "--shares",
        default=",".join(str(share) for share in SHARES),
        help="budgets of the growing sessions by shape, as shares of the largest render",
    )
    parser.add_argument("--shapes", help="only these shapes of growing session (comma-separated)")
    parser.add_argument("--only", choices=PARTS, action="append", help="only these parts")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    parts = set(args.only or PARTS)
    shares = tuple(float(share) for share in args.shares.split(","))
    shapes = set(args.shapes.split(",")) if args.shapes else None

    builds = Builds()
    results: dict[str, Any] = {"load_average": [round(x, 2) for x in os.getloadavg()]}
    if "growing_session" in parts:
        results["growing_session"] = {
            "budget": args.budget,
            "cache": grow(builds, args.renders, args.budget, BLOCK_SHARE, "cache"),
            "tight": grow(builds, args.renders, args.budget, BLOCK_SHARE, "tight"),
            # One-item blocks: the oldest events go one at a time, just enough to fit.
            "naive_sliding_window": grow(builds, args.renders, args.budget, 10**9, "tight"),
        }
    if "far_under_budget" in parts:
        results["far_under_budget"] = far_under(args.repeat * 30)
    if "one_megabyte_to_100k_tokens" in parts:
        results["one_megabyte_to_100k_tokens"] = {
            name: megabyte(args.repeat * 3, name) for name in ("cl100k_base", "o200k_base")
        }
    if "shapes" in parts:
        results["growing_sessions_by_shape"] = grow_shapes(shares, shapes)
    results["load_average_at_the_end"] = [round(x, 2) for x in os.getloadavg()]
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"load average {results['load_average']}")
    for name, value in results.items():
        if name == "growing_sessions_by_shape":
            print_shapes(value)
        elif isinstance(value, dict):
            print(f"\n{name}")
            for key, item in value.items():
                print(f"  {key}: {item}")
    print(f"\nload average at the end {results['load_average_at_the_end']}")


def print_shapes(rows: dict[str, Any]) -> None:
    print("\ngrowing sessions by shape (cache | tight)")
    columns = ("prefix_stability", "cached_share", "mean_budget_use")
    print(
        f"  {'session':34} {'renders':>7} {'new cuts':>9}  "
        + "  ".join(f"{c.replace('_', ' '):>21}" for c in columns)
        + f"  {'least use at a cut':>18}"
    )
    for name, row in rows.items():
        cache, tight = row["cache"], row["tight"]
        cells = "  ".join(f"{cache[c]:>10.3f} | {tight[c]:<8.3f}" for c in columns)
        least = cache["min_budget_use_at_a_new_cut"]
        least_text = "-" if least is None else f"{least:.3f}"
        print(
            f"  {name:34} {cache['renders']:>7} {cache['new_cuts']:>4} | {tight['new_cuts']:<3}"
            f"  {cells}  {least_text:>18}"
            + ("" if cache["broken_breakpoints"] == 0 else "  BREAKPOINTS NOT KEPT")
        )


if __name__ == "__main__":
    main()
