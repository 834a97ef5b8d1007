"""The goal block: exactly CONTRACT.md §10's shape, left out piece by piece when sparse."""

from typing import Any

from schemas.system_prompt import Goal
from tests.families.seed_text import seed_003_goal_block
from tests.families.system_prompt.helpers import build, system_text
from worker.families.system_prompt.goal import render_goal

# Seed 003's own example, "Goal in System Prompt": the goal here, the block as the seed
# prints it (tests/families/seeds/).
SEED_GOAL: dict[str, Any] = {
    "description": "Implement user authentication system",
    "priority": "high",
    "status": "active",
    "checkpoints": [
        {"description": "Design authentication flow", "status": "completed"},
        {"description": "Implement login endpoint", "status": "completed"},
        {"description": "Add JWT token generation", "status": "in-progress"},
        {"description": "Create user registration", "status": "pending"},
        {"description": "Add password hashing", "status": "pending"},
    ],
    "decisions": [
        {"description": "Use JWT for authentication", "rationale": "stateless", "locked": True},
        {"description": "Store tokens in httpOnly cookies", "rationale": "XSS", "locked": True},
        {"description": "Use bcrypt for password hashing", "rationale": "standard"},
    ],
    "artifacts": [
        {"type": "file", "path": "src/auth/login.ts", "action": "created"},
        {"type": "file", "path": "src/auth/jwt.ts", "action": "created"},
        {"type": "file", "path": "src/routes/api.ts", "action": "modified"},
    ],
}

SEED_BLOCK = seed_003_goal_block()


def goal(data: dict[str, Any]) -> Goal:
    return Goal.model_validate(data)


def test_the_seed_example_renders_exactly() -> None:
    assert render_goal(goal(SEED_GOAL)) == SEED_BLOCK


def test_a_bare_goal_is_its_three_header_lines() -> None:
    assert render_goal(goal({"description": "Ship it"})) == (
        "CURRENT GOAL: Ship it\nPriority: Medium\nStatus: Active"
    )


def test_empty_sub_lists_are_left_out_with_heading_and_blank_line() -> None:
    data = {
        "description": "Cut latency",
        "priority": "low",
        "status": "paused",
        "decisions": [{"description": "Cache at the edge", "locked": False}],
    }
    assert render_goal(goal(data)) == (
        "CURRENT GOAL: Cut latency\nPriority: Low\nStatus: Paused\n\n"
        "Key Decisions:\n- Cache at the edge"
    )


def test_only_checkpoints_and_artifacts() -> None:
    data = {
        "description": "Fix the alert",
        "status": "completed",
        "checkpoints": [{"description": "Silence", "status": "completed"}],
        "artifacts": [{"type": "test", "path": "t/alert_test.py", "action": "deleted"}],
    }
    assert render_goal(goal(data)) == (
        "CURRENT GOAL: Fix the alert\nPriority: Medium\nStatus: Completed\n\n"
        "Checkpoints:\n✅ 1. Silence\n\n"
        "Artifacts:\n- Deleted: t/alert_test.py"
    )


def test_text_with_braces_and_newlines_passes_through() -> None:
    data = {"description": "{x} and {{y}}", "checkpoints": [{"description": "a\nb"}]}
    assert render_goal(goal(data)) == (
        "CURRENT GOAL: {x} and {{y}}\nPriority: Medium\nStatus: Active\n\nCheckpoints:\n⏳ 1. a\nb"
    )


def test_the_goal_block_is_never_trimmed_even_far_over_budget() -> None:
    many = {
        "description": "Big goal",
        "checkpoints": [{"description": f"step {n} " + "x" * 80} for n in range(60)],
    }
    result = build({"tier": 1, "goal": many})
    assert result.meta["over_budget"] is True
    assert render_goal(goal(many)) in system_text(result)
