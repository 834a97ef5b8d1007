"""The steps of the `"cache"` policy (worker/render/budget/steps.py): where they end does
not move as a session grows, and a step is only halved to keep the prompt's use."""

from itertools import accumulate

from hypothesis import given
from hypothesis import strategies as st

from worker.render.budget import steps

sizes = st.lists(st.integers(min_value=1, max_value=5_000), min_size=1, max_size=60)


def starts_of(items: list[int]) -> list[int]:
    return [0, *accumulate(items)][:-1]


@given(value=st.integers(min_value=1, max_value=10**12))
def test_the_grid_keeps_the_highest_bits(value: int) -> None:
    rounded = steps.grid_down(value)
    # At most an eighth less, and on the grid.
    assert rounded <= value < rounded * 9 / 8 + 1
    assert steps.grid_down(rounded) == rounded


@given(
    items=sizes,
    more=sizes,
    count=st.integers(min_value=0, max_value=60),
    step=st.integers(1, 20_000),
)
def test_a_step_ends_where_it_did_however_the_list_grows(
    items: list[int], more: list[int], count: int, step: int
) -> None:
    count = min(count, len(items))
    before = steps.step_end(starts_of(items), count, step)
    after = steps.step_end(starts_of(items + more), count, step)
    assert count <= before <= len(items)
    if before < len(items):
        assert after == before
    else:
        assert after >= before


@given(items=sizes, count=st.integers(min_value=0, max_value=60), step=st.integers(1, 20_000))
def test_the_ends_of_half_steps_include_those_of_whole_steps(
    items: list[int], count: int, step: int
) -> None:
    starts = starts_of(items)
    count = min(count, len(items))
    whole = steps.step_end(starts, count, step)
    half = steps.step_end(starts, count, max(1, step // 2))
    assert count <= half <= whole
    if whole < len(items):
        # An end of a whole step is an end of a half step too.
        assert steps.step_end(starts, whole, max(1, step // 2)) == whole


@given(
    items=sizes,
    count=st.integers(min_value=1, max_value=60),
    step=st.integers(1, 50_000),
    used=st.integers(min_value=0, max_value=20_000),
    limit=st.integers(min_value=1, max_value=20_000),
)
def test_a_cut_is_a_whole_step_unless_that_leaves_under_half_the_budget(
    items: list[int], count: int, step: int, used: int, limit: int
) -> None:
    starts = starts_of(items)
    count = min(count, len(items))

    def tokens(position: int) -> float:
        return items[position] / 4

    chosen = steps.choose_cut(starts, count, step, used, limit, tokens)
    whole = steps.step_end(starts, count, step)
    left = used - sum(tokens(p) for p in range(count, chosen))
    assert count <= chosen <= whole
    assert chosen == count or left >= steps.MIN_USE * limit
    if used - sum(tokens(p) for p in range(count, whole)) >= steps.MIN_USE * limit:
        assert chosen == whole
    # The choice is an end of some halving of the step.
    ends = set()
    size = step
    while size >= 1:
        ends.add(steps.step_end(starts, count, size))
        size //= 2
    assert chosen in ends | {count}


@given(
    length=st.integers(min_value=2_000, max_value=400_000),
    growth=st.integers(min_value=1, max_value=20_000),
    cap=st.integers(min_value=100, max_value=20_000),
    ratio=st.floats(min_value=2.0, max_value=5.0),
    limit=st.integers(min_value=1_000, max_value=50_000),
)
def test_a_growing_text_keeps_its_beginning_and_loses_its_middle_in_steps(
    length: int, growth: int, cap: int, ratio: float, limit: int
) -> None:
    tokens = int(length / ratio)
    before = steps.middle_window(length, tokens, cap, ratio, limit)
    longer = length + growth
    after = steps.middle_window(longer, int(longer / ratio), cap, ratio, limit)
    if before is None:
        return
    assert after is not None
    head, gone = before
    assert 0 <= head <= length and 0 < gone <= length - head
    # What is kept takes no more than the cap (by the ratio the text has).
    assert length - gone <= cap * ratio + 1
    # The beginning kept does not depend on the text's length.
    assert after[0] == head
    assert after[1] >= gone
    # The middle goes in whole steps: the same cut until the text outgrows it.
    step_tokens = min(steps.STEP_SHARE * limit, steps.ROOM_SHARE * (cap - cap // 2))
    step = steps.grid_down(int(step_tokens * ratio))
    assert gone % step == 0 or gone == length - head
