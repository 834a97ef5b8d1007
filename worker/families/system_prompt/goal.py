"""The goal block of the system prompt (seed 003's example, exactly as CONTRACT.md §10)."""

from schemas.system_prompt import (
    ArtifactAction,
    CheckpointStatus,
    Goal,
    GoalPriority,
    GoalStatus,
)

# Labels looked up by member rather than computed from `.value`: enum attribute access
# is slow on Python 3.11 (docs/PERFORMANCE.md, "The builder").
_PRIORITY = {priority: f"Priority: {priority.value.capitalize()}" for priority in GoalPriority}
_STATUS = {status: f"Status: {status.value.capitalize()}" for status in GoalStatus}
_ACTION = {action: f"- {action.value.capitalize()}: " for action in ArtifactAction}
_CHECKPOINT = {
    CheckpointStatus.COMPLETED: ("✅ ", ""),
    CheckpointStatus.IN_PROGRESS: ("🔄 ", " (IN PROGRESS)"),
    CheckpointStatus.PENDING: ("⏳ ", ""),
}


def render_goal(goal: Goal) -> str:
    """The block as text. It is never shortened: goals survive any budget (seed 003)."""
    lines = [f"CURRENT GOAL: {goal.description}", _PRIORITY[goal.priority], _STATUS[goal.status]]
    if goal.checkpoints:
        lines += ("", "Checkpoints:")
        for n, checkpoint in enumerate(goal.checkpoints, start=1):
            mark, note = _CHECKPOINT[checkpoint.status]
            lines.append(f"{mark}{n}. {checkpoint.description}{note}")
    if goal.decisions:
        lines += ("", "Key Decisions:")
        for decision in goal.decisions:
            if decision.locked:
                lines.append(f"🔒 {decision.description} (locked)")
            else:
                lines.append(f"- {decision.description}")
    if goal.artifacts:
        lines += ("", "Artifacts:")
        lines += [_ACTION[artifact.action] + artifact.path for artifact in goal.artifacts]
    return "\n".join(lines)
