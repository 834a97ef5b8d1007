"""The goal block of the system prompt (seed 003's example, exactly as SPEC.md §10)."""

from schemas.system_prompt import CheckpointStatus, Goal

_CHECKPOINT_LINE: dict[CheckpointStatus, str] = {
    CheckpointStatus.COMPLETED: "✅ {n}. {description}",
    CheckpointStatus.IN_PROGRESS: "🔄 {n}. {description} (IN PROGRESS)",
    CheckpointStatus.PENDING: "⏳ {n}. {description}",
}


def render_goal(goal: Goal) -> str:
    """The block as text. It is never shortened: goals survive any budget (seed 003)."""
    lines = [
        f"CURRENT GOAL: {goal.description}",
        f"Priority: {goal.priority.value.capitalize()}",
        f"Status: {goal.status.value.capitalize()}",
    ]
    if goal.checkpoints:
        lines += ["", "Checkpoints:"]
        lines += [
            _CHECKPOINT_LINE[checkpoint.status].format(n=n, description=checkpoint.description)
            for n, checkpoint in enumerate(goal.checkpoints, start=1)
        ]
    if goal.decisions:
        lines += ["", "Key Decisions:"]
        for decision in goal.decisions:
            if decision.locked:
                lines.append(f"🔒 {decision.description} (locked)")
            else:
                lines.append(f"- {decision.description}")
    if goal.artifacts:
        lines += ["", "Artifacts:"]
        lines += [f"- {a.action.value.capitalize()}: {a.path}" for a in goal.artifacts]
    return "\n".join(lines)
