"""Reusable sections of the user message (seed `components.go`), plus the rerun section.

Outside text is wrapped in HTML-comment boundaries and passed through as-is.
"""

from schemas.job import PreviousAttempt


def format_alert_section(alert_type: str, alert_data: str) -> str:
    head = "## Alert Details\n\n"
    if alert_type:
        head += f"### Alert Metadata\n**Alert Type:** {alert_type}\n\n"
    if not alert_data:
        return head + "### Alert Data\nNo additional alert data provided.\n"
    return (
        f"{head}### Alert Data\n<!-- ALERT_DATA_START -->\n{alert_data}\n<!-- ALERT_DATA_END -->\n"
    )


def format_runbook_section(runbook_content: str) -> str:
    if not runbook_content:
        return "## Runbook Content\nNo runbook available.\n"
    return (
        "## Runbook Content\n```markdown\n<!-- RUNBOOK START -->\n"
        f"{runbook_content}\n<!-- RUNBOOK END -->\n```\n"
    )


def format_chain_context(previous_stage_context: str) -> str:
    if not previous_stage_context:
        return (
            "## Previous Stage Data\n"
            "No previous stage data is available for this alert. This is the first stage of analysis.\n"
        )
    return f"## Previous Stage Data\n{previous_stage_context}\n"


def format_previous_attempt(attempt: PreviousAttempt) -> str:
    """The rerun section of CONTRACT.md §10 (seed 004's previous context), ending in a newline."""
    lines = [
        f"## Previous Attempt (attempt {attempt.attempt_number})",
        "The previous attempt at this stage did not complete.",
    ]
    if attempt.previous_attempt_at:
        lines.append(f"**Failed at:** {attempt.previous_attempt_at}")
    if attempt.error_message:
        lines.append(f"**Error:** {attempt.error_message}")
    if attempt.previous_output:
        lines.append("<!-- PREVIOUS_ATTEMPT_START -->")
        lines.append(attempt.previous_output)
        lines.append("<!-- PREVIOUS_ATTEMPT_END -->")
    lines.append("Build on what it established and do not repeat what failed.")
    return "\n".join(lines) + "\n"
