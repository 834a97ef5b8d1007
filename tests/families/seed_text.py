"""Expectations read from the seeds' own text, not from the templates under test.

tests/families/seeds/ holds passages copied verbatim from the seed documents (the
product's reference, kept beside the workspace and never read by the suite): seed 003's
assembly order, tier table and goal example, and seed 004's episodic-memory guidance.
"""

import re
from pathlib import Path

SEEDS = Path(__file__).parent / "seeds"


def _read(name: str) -> str:
    return (SEEDS / name).read_text(encoding="utf-8")


def seed_003_assembly_order() -> list[str]:
    """The sections of the system message after the template, in seed 003's order."""
    return re.findall(r"^\d\. ([A-Z][A-Za-z ]+?) \(", _read("003_system_prompt.md"), re.M)


def seed_003_tiers() -> dict[int, tuple[list[int], int]]:
    """Tier -> (the context sizes in tokens seed 003 lists for it, its prompt budget)."""
    rows = re.findall(
        r"^\| \*\*Tier (\d) \(\w+\)\*\* +\| ([\dK, ]+?) +\| (\d+) tokens",
        _read("003_system_prompt.md"),
        re.M,
    )
    return {
        int(tier): ([int(size.strip()[:-1]) * 1024 for size in sizes.split(",")], int(budget))
        for tier, sizes, budget in rows
    }


def seed_003_goal_block() -> str:
    """Seed 003's example of the goal section ("Goal in System Prompt")."""
    text = _read("003_system_prompt.md")
    return text[
        text.index("[Active Goal]\n") + len("[Active Goal]\n") : text.index("\n\n[Active Skills]")
    ]


def seed_004_episodic_memory() -> str:
    """Seed 004's episodic-memory guidance block (section 5), without its fence."""
    return _read("004_episodic_memory.md")
