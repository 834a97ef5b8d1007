"""Growing sessions of every shape, generated, and what a caller pays for them.

A session is the list of jobs a caller sends as an investigation or a chat goes on: each
job is the one before it grown by `step` items of what grows (CONTRACT.md §11.1), every
one under the same budget, a share of the largest job's size (as a caller sizes a
budget for the model it uses). The texts are made by arithmetic from their seed, never
by `random` (whose helpers may change between Python versions), so a session is the
same everywhere and a rendering of it can be pinned (tests/render/budget/tight_renders.jsonl).

`figures` measures a rendered session the way a caller meets it: the share of each
message the next render repeats as a prefix, the share of the prompt tokens a
provider's cache serves (meta.cache's breakpoints, as far as the next render really
repeats them), and the share of the budget the prompts use. bench/bench_budgets.py
reports the same figures.
"""

import copy
import json
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

import orjson

from tests.data import BENCH_JOBS, CONFORMANCE, read_jsonl
from worker.render.budget import tokenizers
from worker.render.cache import common_prefix
from worker.render.renderer import Renderer

Job = dict[str, Any]
Messages = list[dict[str, str]]

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
    "namespace",
    "prod",
    "trace",
    "4f2a9c",
    '{"ready":',
    "false}",
    "/var/log/app.log",
    "✅",
    "漢字",
    "--",
    "==>",
    "db-primary:5432",
    "timeout=30s",
]
EVENT_TYPES = ("llm_thinking", "tool_call", "tool_result", "tool_result", "llm_response")


class Draws:
    """A stream of numbers from a seed (a 64-bit linear congruential generator)."""

    def __init__(self, seed: int) -> None:
        self.state = (seed * 2654435761 + 1) % 2**64

    def below(self, bound: int) -> int:
        self.state = (self.state * 6364136223846793005 + 1442695040888963407) % 2**64
        return (self.state >> 33) % bound

    def between(self, low: int, high: int) -> int:
        return low + self.below(high - low + 1)


@cache  # a session repeats its items in every render
def text(seed: int, chars: int) -> str:
    """About `chars` characters of log-like lines."""
    draws = Draws(seed)
    lines: list[str] = []
    size = 0
    while size < chars:
        line = " ".join(WORDS[draws.below(len(WORDS))] for _ in range(draws.between(6, 14)))
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)[:chars]


def event(number: int, seed: int = 0, huge: bool = False) -> dict[str, str]:
    """The `number`th event of a session: tool results are large, the rest small; every
    17th is a conclusion (cut last, CONTRACT.md §11)."""
    draws = Draws(seed * 100_003 + number)
    if huge:
        event_type, size = "tool_result", draws.between(15_000, 40_000)
    elif number % 17 == 16:
        event_type, size = "final_analysis", draws.between(300, 900)
    else:
        event_type = EVENT_TYPES[number % len(EVENT_TYPES)]
        size = draws.between(800, 4000) if event_type == "tool_result" else draws.between(150, 600)
    return {"event_type": event_type, "content": f"[{number}] " + text(seed + number, size)}


def exchange(number: int) -> dict[str, Any]:
    return {
        "user_question": f"follow-up {number}: what about {WORDS[number % len(WORDS)]}?",
        "messages": [{"role": "assistant", "content": text(1_000 + number, 1_500)}],
    }


def stage_text(count: int) -> str | None:
    """A pre-formatted chain context of `count` earlier stages, each appended."""
    return "".join(f"## Stage {n}\n{text(2_000 + n, 2_400)}\n\n" for n in range(count)) or None


def _bench(name: str) -> Job:
    job: Job = json.loads((BENCH_JOBS / name).read_text(encoding="utf-8"))
    return job


def _family_job(kind: str) -> Job:
    for case in read_jsonl(CONFORMANCE / "families.jsonl"):
        if case["job"]["kind"] == kind:
            return copy.deepcopy(case["job"])
    raise LookupError(kind)


def _chat(kind: str, events: int, history: list[dict[str, Any]] | None) -> Job:
    job = _bench("typical_chat_job.json")
    job["kind"] = kind
    job["chat"]["investigation_events"] = [event(n, seed=3) for n in range(events)]
    if history is not None:
        job["chat"]["history"] = history
    return job


def _stage(kind: str, events: list[dict[str, str]] | None, context: str | None = None) -> Job:
    job = _bench("typical_react_job.json")
    job["kind"] = kind
    if kind == "synthesis":
        job.pop("tools", None)
    job["stage"]["previous_stage_context"] = context
    job["stage"]["previous_stage_events"] = events
    return job


def _legacy(kind: str, count: int) -> Job:
    job = _family_job(kind)
    legacy = job["legacy"]
    legacy["runbook_content"] = "# Runbook\n" + text(77, 3_000)
    if kind == "legacy_react":
        legacy["previous_stage_context"] = stage_text(2)
        legacy["react_history"] = [
            f"Thought: {text(3_000 + n, Draws(n).between(200, 1_200))}" for n in range(count)
        ]
    elif kind == "legacy_iterative_tool_selection":
        legacy["iteration_history"] = [
            {"partial_analysis": text(4_000 + n, Draws(n).between(300, 1_500))}
            for n in range(count)
        ]
    else:
        legacy["previous_stage_context"] = stage_text(count)
    return job


@dataclass(frozen=True, slots=True)
class Shape:
    """A kind of growing session: `job(n)` is the session with `n` items of what grows."""

    name: str
    job: Callable[[int], Job]
    first: int  # items of the session's first render
    last: int  # items of its last
    step: int = 1  # items added between renders

    def sizes(self) -> range:
        return range(self.first, self.last + 1, self.step)


SHAPES: tuple[Shape, ...] = (
    Shape("chat", lambda n: _chat("react", n, []), 40, 200),
    Shape("chat_with_history", lambda n: _chat("react", n, None), 40, 200),
    Shape(
        "chat_growing_history",
        lambda n: _chat("native_thinking", 40, [exchange(i) for i in range(n)]),
        10,
        120,
    ),
    Shape("native_thinking_chat", lambda n: _chat("native_thinking", n, []), 40, 160),
    Shape("stage_events", lambda n: _stage("react", [event(i, seed=5) for i in range(n)]), 40, 200),
    Shape(
        "synthesis_events",
        lambda n: _stage("synthesis", [event(i, seed=6) for i in range(n)]),
        40,
        160,
    ),
    Shape(
        "stage_huge_events",
        lambda n: _stage("react", [event(i, seed=9, huge=True) for i in range(n)]),
        4,
        40,
    ),
    Shape("stage_context", lambda n: _stage("react", None, stage_text(n)), 10, 120),
    Shape("legacy_react_history", lambda n: _legacy("legacy_react", n), 20, 160),
    Shape("legacy_iterations", lambda n: _legacy("legacy_iterative_tool_selection", n), 20, 200),
    Shape("legacy_chain_context", lambda n: _legacy("legacy_final_analysis", n), 10, 120),
)
SHAPES_BY_NAME = {shape.name: shape for shape in SHAPES}
# Issue 45's trial: chats of 30 to 90 investigation events (with and without history)
# and a stage of 20 to 70 previous-stage events, two events a render. A render adds
# 5-10% of a 25% or 45% budget: more than the targets allow for (docs/BUDGETS.md, "Prompt
# caching": what bounds these figures).
TRIAL_SHAPES: tuple[Shape, ...] = (
    Shape("trial_chat", lambda n: _chat("react", n, []), 30, 90, 2),
    Shape("trial_chat_with_history", lambda n: _chat("react", n, None), 30, 90, 2),
    Shape(
        "trial_stage_events",
        lambda n: _stage("react", [event(i, seed=5) for i in range(n)]),
        20,
        70,
        2,
    ),
)
SHARES = (0.25, 0.45, 0.70)


def render(renderer: Renderer, job: Job) -> dict[str, Any]:
    reply: dict[str, Any] = orjson.loads(renderer.render(orjson.dumps(job)).body)
    return reply


def budget_for(renderer: Renderer, shape: Shape, share: float, tokenizer: str) -> int:
    """`share` of the size of the shape's largest render by `tokenizer`, as a caller
    sizes a budget for a model that cannot take the whole session."""
    reply = render(renderer, shape.job(shape.last))
    counter = tokenizers.get(tokenizer)
    return max(1, int(sum(counter.count(m["content"]) for m in reply["messages"]) * share))


def rendered(
    renderer: Renderer, shape: Shape, share: float, tokenizer: str, policy: str | None = None
) -> tuple[list[dict[str, Any]], int]:
    """The replies to the session at `share` of its largest render, and the budget."""
    limit = budget_for(renderer, shape, share, tokenizer)
    return [render(renderer, job) for job in session(shape, limit, tokenizer, policy)], limit


def session(
    shape: Shape,
    limit: int,
    tokenizer: str,
    policy: str | None = None,
) -> Iterator[Job]:
    """The session's jobs, each under the budget of `limit` tokens."""
    budget: dict[str, Any] = {"max_prompt_tokens": limit, "tokenizer": tokenizer}
    if policy is not None:
        budget["policy"] = policy
    for count in shape.sizes():
        job = shape.job(count)
        job["job_id"] = f"{shape.name}-{count}"
        # The budget first: a catalogue is only skipped unparsed as the body's last member.
        yield {"budget": budget, **job}


def repeats(before: Messages, after: Messages, message: int, chars: int) -> bool:
    """Whether `after` repeats `before` up to `chars` characters of message `message`."""
    return after[:message] == before[:message] and (
        message < len(after)
        and after[message]["content"][:chars] == before[message]["content"][:chars]
    )


def cuts(reply: dict[str, Any]) -> list[tuple[str, int, int]]:
    budget = reply["meta"].get("budget") or {"elisions": []}
    return [(e["section"], e["items"], e["chars"]) for e in budget["elisions"]]


@dataclass(frozen=True, slots=True)
class Figures:
    renders: int
    trimmed: int
    new_cuts: int  # consecutive pairs whose cuts differ
    # Per message, the mean over consecutive pairs of the share of the earlier render's
    # message that the later one repeats as a prefix; the least of the messages.
    prefix_stability: float
    # Tokens before the last breakpoint of each render's predecessor that the render
    # repeats, over the prompt tokens of every render (the first one is all new).
    cached_share: float
    # prompt tokens / budget: mean over the trimmed renders, least over the renders that
    # start a new cut, greatest over all.
    mean_budget_use: float
    min_budget_use_at_a_new_cut: float | None
    max_budget_use: float
    broken_breakpoints: int  # breakpoints that did not hold where §11.1 promises they do

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


def figures(replies: list[dict[str, Any]], limit: int) -> Figures:
    shares: dict[int, list[float]] = {}
    cached = 0
    prompt = 0
    uses: list[float] = []
    at_new_cut: list[float] = []
    top = 0.0
    new_cuts = 0
    broken = 0
    previous: dict[str, Any] | None = None
    for reply in replies:
        assert reply["status"] == "ok", reply
        messages: Messages = reply["messages"]
        tokens = reply["meta"]["cache"]["prompt_tokens"]
        prompt += tokens
        use = tokens / limit
        top = max(top, use)
        trimmed = bool(reply["meta"]["budget"]["trimmed"])
        if trimmed:
            uses.append(use)
        if previous is not None:
            before: Messages = previous["messages"]
            for index, message in enumerate(before):
                old = message["content"]
                new = messages[index]["content"] if index < len(messages) else ""
                same = common_prefix(old, new)
                shares.setdefault(index, []).append(same / len(old) if old else 1.0)
            held = [
                point
                for point in previous["meta"]["cache"]["breakpoints"]
                if repeats(before, messages, point["message"], point["chars"])
            ]
            if held:
                cached += held[-1]["tokens"]
            new_cut = cuts(previous) != cuts(reply)
            new_cuts += new_cut
            if new_cut and trimmed:
                at_new_cut.append(use)
            broken += len(promised(previous, reply)) - len(
                [p for p in promised(previous, reply) if p in held]
            )
        previous = reply
    return Figures(
        renders=len(replies),
        trimmed=len(uses),
        new_cuts=new_cuts,
        prefix_stability=round(min(statistics.fmean(s) for s in shares.values()), 4)
        if shares
        else 1.0,
        cached_share=round(cached / prompt, 4),
        mean_budget_use=round(statistics.fmean(uses), 4) if uses else 0.0,
        min_budget_use_at_a_new_cut=round(min(at_new_cut), 4) if at_new_cut else None,
        max_budget_use=round(top, 4),
        broken_breakpoints=broken,
    )


def promised(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """The breakpoints of `before` that CONTRACT.md §11.1 promises `after` repeats: all
    of them when both cut the same, else those up to the earlier of their `cut` points."""
    points: list[dict[str, Any]] = before["meta"]["cache"]["breakpoints"]
    if cuts(before) == cuts(after):
        return points
    bound = min(
        (
            (cut["message"], cut["chars"])
            for cut in (before["meta"]["cache"].get("cut"), after["meta"]["cache"].get("cut"))
            if cut is not None
        ),
        default=None,
    )
    if bound is None:
        return []
    return [p for p in points if (p["message"], p["chars"]) <= bound]
