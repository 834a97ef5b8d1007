"""Cache breakpoints: `meta.cache` of every `ok` reply (CONTRACT.md §11.1).

The family says where its prompt stops being stable as the session grows (its
`stable_end`, a (message, characters) point, or None when nothing grows); this module
turns that point into at most four breakpoints, in prompt order, with the tokens before
each:

* the end of every message wholly before the point (the system message first),
* where a budgeted render's cuts begin, when that is before the point: a render that
  cuts differently repeats the prompt up to there (`first_difference`), so the cache
  restarts there rather than at the start, and
* the point itself, when it is inside a message.

When more than four qualify, the first (the system message's end) and the last three
are kept: a provider caches up to a breakpoint, so the last one is what pays.

Tokens are counted as the prompt is (the sum over messages of each content's count):
without a budget by the estimate, which costs a few `len` calls; with one by the budget's
tokenizer, from the per-message counts when the trimmer has them and, inside a message,
as the message's count less its tail's, the tail split off at a line seam where counts
add up (pieces.py), so that a long stable prefix is not tokenized a second time.
"""

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from schemas.budget import DEFAULT_TOKENIZER
from worker.families.base import Messages, StablePoint

if TYPE_CHECKING:
    from worker.render.budget.tokenizers import Tokenizer

MAX_BREAKPOINTS = 4
# How many newlines back from a breakpoint a line seam is looked for.
SEAM_TRIES = 32


def _estimate(text_length: int) -> int:
    return -(-text_length // 4)


def first_difference(before: Messages, after: Messages) -> tuple[int, int]:
    """(message, characters): where `after` first departs from `before`."""
    for index, (old, new) in enumerate(zip(before, after, strict=False)):
        if old == new:
            continue
        if old["role"] != new["role"]:
            return index, 0
        return index, common_prefix(old["content"], new["content"])
    return min(len(before), len(after)), 0


def common_prefix(a: str, b: str) -> int:
    """The length of the longest common prefix of `a` and `b`, comparing halving spans
    (each a memory comparison): linear in the prefix, not a loop over characters."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[low:middle] == b[low:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def positions(
    messages: Messages, stable: StablePoint, cut: tuple[int, int] | None = None
) -> list[tuple[int, int]]:
    """The breakpoints' (message, characters), at most MAX_BREAKPOINTS, in prompt order;
    `cut`: where the render's cuts begin, if anything is cut."""
    if stable is None:
        whole, inside = len(messages), 0
    else:
        whole, inside = stable
        whole = min(whole, len(messages))
    found = [(j, len(messages[j]["content"])) for j in range(whole)]
    if inside > 0 and whole < len(messages):
        found.append((whole, min(inside, len(messages[whole]["content"]))))
    if cut is not None and cut < (whole, inside) and cut not in found:
        found.append(cut)
        found.sort()
    found = [(j, chars) for j, chars in found if chars > 0]
    if len(found) > MAX_BREAKPOINTS:
        found = [found[0], *found[-(MAX_BREAKPOINTS - 1) :]]
    return found


def _seam_before(text: str, index: int) -> int | None:
    """The last line seam at or before `index` (pieces.line_seam_at), if one is near."""
    from worker.render.budget.pieces import line_seam_at

    if line_seam_at(text, index):
        return index
    newline = text.rfind("\n", 0, index)
    for _ in range(SEAM_TRIES):
        if newline < 0:
            return None
        if line_seam_at(text, newline + 1) and newline + 1 <= index:
            return newline + 1
        newline = text.rfind("\n", 0, newline)
    return None


def _prefix_tokens(tokenizer: "Tokenizer", text: str, chars: int, total: int) -> int:
    """Tokens of text[:chars], given `total`, the count of `text`: the prefix counted
    alone, or, when it is the longer part, `total` less the rest's count."""
    if chars >= len(text):
        return total
    if tokenizer.line_seams and chars > len(text) - chars:
        seam = _seam_before(text, chars)
        if seam is not None:
            # text = text[:seam] + text[seam:], additive at the seam; so is text[:chars].
            tail, middle = tokenizer.count_many([text[seam:], text[seam:chars]])
            return total - tail + middle
    return tokenizer.count(text[:chars])


def estimate_cache_meta(messages: Messages, stable: StablePoint) -> dict[str, Any]:
    """`meta.cache` by the estimate: `cache_meta` without a tokenizer, in the fewest
    steps, since every reply without a budget carries it."""
    count = len(messages)
    whole, inside = (count, 0) if stable is None else (min(stable[0], count), stable[1])
    if whole >= MAX_BREAKPOINTS:
        return cache_meta(messages, stable)
    breakpoints = []
    tokens = 0
    for j, message in enumerate(messages):
        size = len(message["content"])
        if j == whole and inside > 0 and size:
            chars = min(inside, size)
            breakpoints.append({"message": j, "chars": chars, "tokens": tokens - (-chars // 4)})
        tokens += -(-size // 4)
        if j < whole and size:
            breakpoints.append({"message": j, "chars": size, "tokens": tokens})
    return {
        "breakpoints": breakpoints,
        "tokenizer": DEFAULT_TOKENIZER,
        "stable_tokens": breakpoints[-1]["tokens"] if breakpoints else 0,
        "prompt_tokens": tokens,
        "cut": None,
    }


def cache_meta(
    messages: Messages,
    stable: StablePoint,
    tokenizer: "Tokenizer | None" = None,
    message_tokens: Sequence[int] | None = None,
    cut: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """`meta.cache`: by the estimate without `tokenizer`, else by it; `message_tokens`
    are the messages' counts by it, when known; `cut`: where the render's cuts begin."""
    found = positions(messages, stable, cut)
    if tokenizer is None or tokenizer.name == DEFAULT_TOKENIZER:
        name = DEFAULT_TOKENIZER
        counts = [_estimate(len(m["content"])) for m in messages]

        def prefix(j: int, chars: int) -> int:
            return sum(counts[:j]) + _estimate(chars)

    else:
        exact = tokenizer
        name = tokenizer.name
        counts = (
            list(message_tokens)
            if message_tokens is not None
            else tokenizer.count_many([m["content"] for m in messages])
        )

        def prefix(j: int, chars: int) -> int:
            if j >= len(messages):
                return sum(counts)
            return sum(counts[:j]) + _prefix_tokens(exact, messages[j]["content"], chars, counts[j])

    points = {point: prefix(*point) for point in found}
    if cut is not None and cut not in points:
        points[cut] = prefix(*cut)
    breakpoints = [{"message": j, "chars": chars, "tokens": points[j, chars]} for j, chars in found]
    return {
        "breakpoints": breakpoints,
        "tokenizer": name,
        "stable_tokens": breakpoints[-1]["tokens"] if breakpoints else 0,
        "prompt_tokens": sum(counts),
        "cut": None if cut is None else {"message": cut[0], "chars": cut[1], "tokens": points[cut]},
    }
