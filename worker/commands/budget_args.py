"""--budget, --tokenizer and --policy: one budget for every job that carries none
(docs/BUDGETS.md), as `render` and `rerender` take them."""

import argparse
from typing import TYPE_CHECKING

from worker.commands.common import int_at_least

if TYPE_CHECKING:
    from schemas.budget import Budget


class BudgetArgumentError(ValueError):
    """--budget/--tokenizer/--policy given in a way that cannot be used; the message says
    why."""


def add_budget_arguments(parser: argparse.ArgumentParser, description: str) -> None:
    group = parser.add_argument_group("budgets", description)
    group.add_argument(
        "--budget",
        type=int_at_least(1),
        metavar="TOKENS",
        help="a budget of TOKENS prompt tokens for every job that has none of its own "
        "(docs/BUDGETS.md); jobs with a budget keep theirs",
    )
    group.add_argument(
        "--tokenizer",
        metavar="NAME",
        help="the tokenizer of --budget: estimate (default), cl100k_base, o200k_base",
    )
    group.add_argument(
        "--policy",
        choices=("cache", "tight"),
        help="the policy of --budget: cache (default: cuts in steps, a growing session keeps "
        "its cached prefix) or tight (cuts as little as fits)",
    )


def default_budget(args: argparse.Namespace, *, check_tokenizer: bool) -> "Budget | None":
    """The budget --budget/--tokenizer/--policy give, None without --budget. `check_tokenizer`:
    refuse a tokenizer this installation does not have (a local render counts here; a
    fleet counts with its own). Raises BudgetArgumentError."""
    from schemas.budget import DEFAULT_POLICY, DEFAULT_TOKENIZER, Budget

    if args.budget is None:
        for given in ("tokenizer", "policy"):
            if getattr(args, given) is not None:
                raise BudgetArgumentError(f"--{given} needs --budget")
        return None
    if args.tokenizer == "":
        raise BudgetArgumentError("--tokenizer: an empty name")
    budget = Budget(
        max_prompt_tokens=args.budget,
        tokenizer=args.tokenizer or DEFAULT_TOKENIZER,
        policy=args.policy or DEFAULT_POLICY,
    )
    if check_tokenizer:
        from worker.render.budget.tokenizers import UnavailableTokenizer, get

        try:
            get(budget.tokenizer)
        except UnavailableTokenizer as exc:
            raise BudgetArgumentError(f"--tokenizer: {exc}") from None
    return budget
