"""Where the `"cache"` policy cuts (CONTRACT.md §11 "Policy", docs/BUDGETS.md).

A provider's prompt cache serves a call the prefix it shares with an earlier one. A
growing session under a budget loses that prefix whenever its cut changes, since what is
cut is the oldest material, near the start of the prompt. So under `"cache"` the cut
moves in *steps*: when the session outgrows its budget, a step of the oldest material
goes at once, and the next renders cut exactly the same, the prompt growing back into
the room the step made, until it no longer fits. A step is a share of the budget, so a
session starts a new cut once per step's worth of growth, whatever it grows by.

Everything here is a function of the job (the worker keeps no session state) that a
growing session leaves where it was:

* A list's steps end at fixed points of its text counted from its oldest item: an item
  ends a step when the characters before it cross a multiple of the step's size, as a
  block boundary does under `"tight"`. The size comes from the budget and the tokens
  per character of the list's oldest items, which a growing list keeps; it is rounded
  to a coarse grid (`grid_down`), so that a few tokens more or less of what the prompt
  keeps never moves it.
* A step is taken whole unless it would leave the prompt under `MIN_USE` of the budget;
  then a half step, a quarter, ... (whose ends include the whole step's), down to the
  single items `"tight"` would cut.
* A text too long even alone keeps a beginning of a fixed size and loses a middle whose
  size is a whole number of steps: a text that grows at its end (a chain context) keeps
  its beginning, its marker and the start of its end as it grows.
"""

from bisect import bisect_left
from collections.abc import Callable, Sequence

# A step is about this share of the budget: the prompt then uses between about
# 1 - STEP_SHARE and all of it, so at least ~75% on average over a session
# (docs/BUDGETS.md, "Prompt caching"), and a session starts a new cut once per that much
# growth.
STEP_SHARE = 0.42
# ... and at most this share of the room the cuttable material has (the budget less what
# is never cut): a larger step would leave nothing to grow back into.
ROOM_SHARE = 0.9
# A step that would leave the prompt under this share of the budget is halved.
MIN_USE = 0.5
# Characters of a list's oldest items (or of a text's beginning) whose tokens per
# character size its steps: a growing session never changes them.
SAMPLE_CHARS = 8192
# The significant bits kept by `grid_down`: step sizes 7-12% apart.
GRID_BITS = 4
# The water level of shortened texts is rounded down to a multiple of the budget over
# this, so that it stays where it is while the session grows.
CAP_GRID = 64


def grid_down(value: int) -> int:
    """`value` (at least 1) with all but its GRID_BITS highest bits cleared."""
    value = max(1, value)
    shift = max(0, value.bit_length() - GRID_BITS)
    return (value >> shift) << shift


def step_chars(limit: int, room: int, chars_per_token: float) -> int:
    """A list's step in characters: STEP_SHARE of the budget, at most ROOM_SHARE of the
    room of its material, in characters by its own ratio, on the grid."""
    tokens = min(STEP_SHARE * limit, ROOM_SHARE * max(room, 1))
    return grid_down(int(tokens * chars_per_token))


def step_end(starts: Sequence[int], count: int, step: int) -> int:
    """The least k >= `count` that ends a step of `step` characters: every item before
    it goes (k == len(starts): all of them), `starts` the characters before each item."""
    size = len(starts)
    if count <= 0 or count >= size:
        return min(max(count, 0), size)
    block = starts[count - 1] // step
    if starts[count] // step != block:
        return count
    return bisect_left(starts, (block + 1) * step, count, size)


def choose_cut(
    starts: Sequence[int],
    count: int,
    step: int,
    used: float,
    limit: int,
    tokens: Callable[[int], float],
) -> int:
    """How many items of a list to cut, at least `count`: the end of the whole step at or
    after `count`, unless that leaves the prompt (`used` tokens with `count` items cut,
    `tokens(p)` those of item p) under MIN_USE of the budget; then the end of a half
    step, and so on, down to `count` itself."""
    floor = MIN_USE * limit
    # sums[i]: the tokens of the items count..count+i-1; finer ends come no later.
    sums = [0.0]
    while step >= 1:
        end = step_end(starts, count, step)
        if end == count:
            return count
        while len(sums) <= end - count:
            sums.append(sums[-1] + tokens(count + len(sums) - 1))
        if used - sums[end - count] >= floor:
            return end
        step //= 2
    return count


def cap_step(limit: int) -> int:
    return max(1, limit // CAP_GRID)


def middle_window(
    length: int, tokens: int, cap: int, head_chars_per_token: float, limit: int
) -> tuple[int, int] | None:
    """(head, gone) for a text of `length` characters and `tokens` tokens to take about
    `cap` tokens: keep its first `head` characters and all after `head + gone`. The head
    is half the cap by the ratio of the text's beginning; the cut is a whole number of
    steps. None: nothing needs to go."""
    head_tokens = cap // 2
    tail_tokens = cap - head_tokens
    head = min(length, int(head_tokens * head_chars_per_token))
    tail = int(tail_tokens * length / tokens) if tokens else length
    need = length - head - tail
    if need <= 0:
        return None
    step_tokens = min(STEP_SHARE * limit, ROOM_SHARE * tail_tokens)
    step = grid_down(int(step_tokens * head_chars_per_token))
    gone = min(-(-need // step) * step, length - head)
    return head, gone
