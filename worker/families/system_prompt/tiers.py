"""Prompt tiers of seed 003: which tier a context window gets and what it may spend."""

# Upper bounds (exclusive) of tiers 1..4; anything at or above the last is tier 5.
TIER_LIMITS: tuple[int, ...] = (8192, 16384, 32768, 65536)

BUDGET_TOKENS: dict[int, int] = {1: 200, 2: 500, 3: 1000, 4: 1500, 5: 1500}

TIERS: tuple[int, ...] = tuple(sorted(BUDGET_TOKENS))


def tier_for_context(context_tokens: int) -> int:
    for tier, limit in enumerate(TIER_LIMITS, start=1):
        if context_tokens < limit:
            return tier
    return len(TIER_LIMITS) + 1


def estimate_tokens(text: str) -> int:
    """CONTRACT.md §10's estimator: ceil(len(text) / 4), in integers so no float rounds."""
    return (len(text) + 3) // 4
