"""Tier selection and budgets of the system_prompt kind (CONTRACT.md §10, seed 003's table)."""

import pytest

from tests.families.seed_text import seed_003_tiers
from tests.families.system_prompt.helpers import BUDGETS, build
from worker.families.system_prompt.tiers import estimate_tokens, tier_for_context


@pytest.mark.parametrize(
    ("context_tokens", "tier"),
    [
        (1, 1),
        (2048, 1),
        (8191, 1),
        (8192, 2),
        (16383, 2),
        (16384, 3),
        (32767, 3),
        (32768, 4),
        (65535, 4),
        (65536, 5),
        (131072, 5),
        (10**12, 5),
    ],
)
def test_context_window_selects_the_tier(context_tokens: int, tier: int) -> None:
    assert tier_for_context(context_tokens) == tier
    meta = build({"context_tokens": context_tokens}).meta
    assert meta["tier"] == tier
    assert meta["budget_tokens"] == BUDGETS[tier]


@pytest.mark.parametrize(
    ("tier", "context_tokens"),
    [(tier, size) for tier, (sizes, _) in seed_003_tiers().items() for size in sizes],
)
def test_each_context_size_of_the_seeds_table_gets_its_tier(tier: int, context_tokens: int) -> None:
    assert build({"context_tokens": context_tokens}).meta["tier"] == tier


def test_the_seeds_table_has_five_tiers() -> None:
    assert sorted(seed_003_tiers()) == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("tier", [1, 2, 3, 4, 5])
def test_an_explicit_tier_is_used_as_is(tier: int) -> None:
    meta = build({"tier": tier}).meta
    assert (meta["tier"], meta["budget_tokens"]) == (tier, BUDGETS[tier])


def test_without_context_or_tier_the_context_defaults_to_8192() -> None:
    assert build({}).meta["tier"] == 2


@pytest.mark.parametrize(("length", "tokens"), [(0, 0), (1, 1), (4, 1), (5, 2), (8, 2), (9, 3)])
def test_tokens_are_a_quarter_of_the_characters_rounded_up(length: int, tokens: int) -> None:
    assert estimate_tokens("x" * length) == tokens


def test_meta_reports_the_estimate_of_the_message_and_whether_it_is_over_budget() -> None:
    small = build({"tier": 5, "use_sanity_checks": False})
    text = small.messages[0]["content"]
    assert small.meta["estimated_tokens"] == -(-len(text) // 4)
    assert small.meta["over_budget"] is False

    big = build({"tier": 1, "additional_instructions": "word " * 400})
    assert big.meta["estimated_tokens"] > BUDGETS[1]
    assert big.meta["over_budget"] is True
    # Over budget is reported, never fixed by cutting text.
    assert ("word " * 400).strip() in big.messages[0]["content"]
