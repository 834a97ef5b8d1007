"""Context-window budgets (CONTRACT.md §11, docs/BUDGETS.md).

`fit_to_budget` is the renderer's one entry: the job's messages, untouched when they fit,
else the job re-built with its least important material left out (the family's plan says
what, families/budget.py; trim.py how), or `OverBudget`. Imported only for jobs that carry a budget.
"""

from collections.abc import Callable

from schemas.budget import DEFAULT_TOKENIZER, Budget
from schemas.job import Job
from worker.families import FAMILIES
from worker.render.budget.meta import Elision, Fitted, OverBudget
from worker.render.budget.tokenizers import UnavailableTokenizer, get
from worker.render.budget.trim import BLOCK_SHARE, Messages, Trimmer

__all__ = ["Elision", "Fitted", "OverBudget", "UnavailableTokenizer", "fit_to_budget"]


def fit_to_budget(
    job: Job,
    budget: Budget,
    messages: Messages,
    build: Callable[[Job], Messages],
    block_share: int = BLOCK_SHARE,
) -> Fitted | OverBudget:
    """`messages` (built from `job` by `build`) fitted into `budget`. Raises
    UnavailableTokenizer."""
    tokenizer = get(budget.tokenizer)
    limit = budget.max_prompt_tokens
    # Most jobs are far under their budget: their size alone proves it, before any
    # planning or tokenizing.
    bound = sum(tokenizer.at_most(m["content"]) for m in messages)
    if bound > limit:
        bound = sum(tokenizer.at_most(m["content"], tight=True) for m in messages)
    if bound <= limit:
        return Fitted(messages, bound, counted=tokenizer.name == DEFAULT_TOKENIZER)
    plan = FAMILIES[job.kind].plan_for(job)
    trimmer = Trimmer(job, build, plan, limit, tokenizer, block_share, budget.policy)
    return trimmer.fit(messages)
