"""Stable prefixes: a growing session keeps its prefix until a new block (`"tight"`) or
step (`"cache"`) is cut."""

import itertools
from typing import Any

import pytest

from schemas.budget import Budget, Policy
from schemas.job import Job
from tests.render.budget.jobs import event, investigation
from worker.families import FAMILIES
from worker.render.budget import Fitted, fit_to_budget
from worker.render.renderer import Renderer

END = "<!-- STAGE_CONTEXT_END -->"


def grow(renderer: Renderer, block_share: int, policy: Policy = "tight") -> list[tuple[int, str]]:
    """(events left out, user message) of each render of a session growing event by
    event past its budget."""

    def build(job: Job) -> list[dict[str, str]]:
        messages = FAMILIES[job.kind].build(job, renderer.context).messages
        return renderer.contributors.apply(job, messages)

    budget = Budget(max_prompt_tokens=6000, policy=policy)
    template: dict[str, Any] = investigation(0)
    renders = []
    for count in range(1, 120):
        # Sizes vary as real events do; none is larger than a block.
        template["stage"]["previous_stage_events"] = [
            event(n, words=20 + (n * 37) % 90) for n in range(count)
        ]
        job = Job.model_validate(template)
        fitted = fit_to_budget(job, budget, build(job), build, block_share=block_share)
        assert isinstance(fitted, Fitted)
        assert fitted.prompt_tokens <= 6000
        left_out = fitted.elisions[0].items if fitted.elisions else 0
        renders.append((left_out, fitted.messages[1]["content"]))
    return renders


@pytest.mark.parametrize("policy", ["tight", "cache"])
def test_the_prefix_holds_until_a_new_block_is_cut(renderer: Renderer, policy: Policy) -> None:
    renders = grow(renderer, block_share=8, policy=policy)
    cuts = [left_out for left_out, _ in renders]
    assert cuts == sorted(cuts), "what was left out never comes back"
    assert cuts[-1] > 40, "the session grew well past its budget"
    for (before_cut, before), (after_cut, after) in itertools.pairwise(renders):
        if before_cut == after_cut:
            # Everything up to the end of the earlier events is still there, unchanged.
            assert after.startswith(before[: before.index(END)])
    # Blocks: an eighth of the budget, here about four events, goes at once, so the
    # prefix breaks at most every third render past the budget, not at every one.
    breaks = len(set(cuts)) - 1
    trimmed = sum(1 for cut in cuts if cut)
    assert breaks * 3 <= trimmed


def test_one_item_blocks_are_a_sliding_window_that_breaks_more_often(renderer: Renderer) -> None:
    ours = {cut for cut, _ in grow(renderer, block_share=8)}
    window = {cut for cut, _ in grow(renderer, block_share=10**9)}
    assert len(window) > 2 * len(ours)


def test_cache_steps_start_a_new_cut_less_often_than_tight_blocks(renderer: Renderer) -> None:
    tight = [cut for cut, _ in grow(renderer, block_share=8)]
    steps = [cut for cut, _ in grow(renderer, block_share=8, policy="cache")]
    assert steps[-1] >= tight[-1] > 40
    # Blocks are an eighth of the budget, steps most of half of it.
    assert 2 * (len(set(steps)) - 1) <= len(set(tight)) - 1
