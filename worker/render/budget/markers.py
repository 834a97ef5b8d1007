"""The marker text that stands in place of what a budget left out (CONTRACT.md §11).

A marker names what was left out, how many and how large, so that the model (and a
person reading the prompt) knows the material existed. Its text only changes when the
cut changes, which keeps consecutive renders of a growing session sharing their prefix:
so sizes are in characters, exact and the same whichever pieces were tokenized, while
tokens go to `meta.budget` (material far beyond the budget is never tokenized, so a
token figure could move from one render to the next).
"""


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def items_left_out(count: int, noun: str, chars: int) -> str:
    return (
        f"[… {_plural(count, 'earlier ' + noun)} ({chars:,} characters) left out "
        "to fit the context window …]"
    )


def middle_left_out(chars: int) -> str:
    return f"\n[… {chars:,} characters left out of the middle to fit the context window …]\n"


# Sizes written in place of the real ones while the cost of the markers themselves is
# measured, before the real figures are known: wide enough for any real job.
PLACEHOLDER_COUNT = 99_999
PLACEHOLDER_CHARS = 99_999_999
