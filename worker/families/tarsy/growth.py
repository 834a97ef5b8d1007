"""Where a growing TARSy session's prompt changes (CONTRACT.md §11.1).

A session grows by more previous-stage events, more chat investigation events, more
chat history exchanges, or a longer pre-formatted chain context. Everything of the user
message before the point where the first of them would change the text is stable; the
point is found from the end, as the length of what follows it (the tail), which this
family knows how it writes:

* a stage with events: the tail is the end marker of the stage context and what comes
  after it (the rerun section, the task); new events go before the end marker;
* a stage with a pre-formatted context: the tail starts right after the context, so a
  context that grows by appending keeps its prefix;
* a stage with neither: the "no previous stage data" text and what follows, all of which
  the first events replace;
* a chat: the history (whose heading counts its exchanges, so a new exchange changes it)
  and the current task; new investigation events go before the history.

The system message never grows. Kinds without growing material report None: their
prompt is stable as a whole.
"""

from schemas.job import INVESTIGATION_KINDS, Job, Kind
from worker.families.base import Messages, StablePoint
from worker.families.tarsy.chat import format_current_task, history_heading, history_length
from worker.families.tarsy.components import format_chain_context, format_previous_attempt
from worker.families.tarsy.templates import ANALYSIS_TASK, SYNTHESIS_TASK

STAGE_CONTEXT_END = "<!-- STAGE_CONTEXT_END -->"
USER = 1  # the index of the user message of the investigation kinds


def _chat_stable_end(job: Job, user: str) -> StablePoint:
    # The history is measured, not joined again: it may be most of the message.
    assert job.chat is not None
    task = format_current_task(job.chat.user_question)
    history = job.chat.history
    head = "\n" + history_heading(len(history)) if history else ""
    end = len(user) - len(task) - (1 + history_length(history) if history else 0)
    if end < 0 or not user.endswith(task) or not user.startswith(head, end):
        return USER, 0
    return USER, end


def _stage_tail(job: Job) -> str:
    stage = job.stage
    after = "\n"
    if stage.previous_attempt is not None:
        after += format_previous_attempt(stage.previous_attempt) + "\n"
    after += SYNTHESIS_TASK if job.kind is Kind.SYNTHESIS else ANALYSIS_TASK
    if stage.previous_stage_events:
        return STAGE_CONTEXT_END + "\n" + after
    if stage.previous_stage_context:
        return "\n" + after
    return format_chain_context("") + after


def stable_end(job: Job, messages: Messages) -> StablePoint:
    if job.kind not in INVESTIGATION_KINDS or len(messages) <= USER:
        return None
    user = messages[USER]["content"]
    if job.chat is not None:
        return _chat_stable_end(job, user)
    tail = _stage_tail(job)
    if not user.endswith(tail):
        # Not as this family writes it (cannot happen for its own builds): promise only
        # what certainly holds.
        return USER, 0
    return USER, len(user) - len(tail)
