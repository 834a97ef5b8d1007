"""Chat follow-up prompts (seed `chat.go`, with deviation D2 for tool messages)."""

from collections.abc import Sequence

from schemas.job import Chat, ChatExchange, Tool
from worker.families.base import NO_TOOL_TEXTS, ToolTexts
from worker.families.tarsy.templates import SEPARATOR
from worker.families.tarsy.tools import available_tools_preamble

# Role -> heading of a history message. `system` is absent: the seed drops it.
# `tool` is deviation D2 (CONTRACT.md §5): the seed dropped it silently.
_HISTORY_HEADINGS = {
    "assistant": "**ASSISTANT:**\n",
    "user": "**Observation:**\n\n",
    "tool": "**Observation (tool):**\n\n",
}


# Between an exchange's question and what follows it, and after each message.
_END = "\n\n"


def history_heading(count: int) -> str:
    """The heading of a history of `count` exchanges (it counts them)."""
    return (
        f"\n{SEPARATOR}\n💬 CHAT HISTORY ({count} previous exchange{'' if count == 1 else 's'})\n"
        f"{SEPARATOR}\n\n"
    )


def _exchange_heading(number: int) -> str:
    return f"## Exchange {number}\n\n**USER:**\n"


def history_length(exchanges: Sequence[ChatExchange]) -> int:
    """`len(format_chat_history(exchanges))`, from the lengths of its texts: the growth
    point of every chat reply (growth.py) measures the history, never formats it again."""
    if not exchanges:
        return 0
    total = len(history_heading(len(exchanges)))
    for number, exchange in enumerate(exchanges, start=1):
        total += len(_exchange_heading(number)) + len(exchange.user_question) + len(_END)
        for message in exchange.messages:
            heading = _HISTORY_HEADINGS.get(message.role)
            if heading is not None:
                total += len(heading) + len(message.content) + len(_END)
    return total


def chat_history_parts(exchanges: Sequence[ChatExchange]) -> list[str]:
    if not exchanges:
        return []
    parts = [history_heading(len(exchanges))]
    for number, exchange in enumerate(exchanges, start=1):
        parts.append(_exchange_heading(number) + exchange.user_question + _END)
        for message in exchange.messages:
            heading = _HISTORY_HEADINGS.get(message.role)
            if heading is not None:
                parts.append(heading)
                parts.append(message.content)
                parts.append(_END)
    return parts


def format_chat_history(exchanges: Sequence[ChatExchange]) -> str:
    return "".join(chat_history_parts(exchanges))


def format_current_task(user_question: str) -> str:
    return (
        f"\n{SEPARATOR}\n🎯 CURRENT TASK\n{SEPARATOR}\n\n"
        f"**Question:** {user_question}\n\n"
        "**Your Task:**\n"
        "Answer the user's question based on the investigation context above.\n"
        "- Reference investigation history when relevant\n"
        "- Use tools to get fresh data if needed\n"
        "- Provide clear, actionable responses\n\n"
        "Begin your response:\n"
    )


def build_chat_user_message(
    chat: Chat,
    investigation_context: Sequence[str],
    tools: Sequence[Tool],
    tool_texts: ToolTexts = NO_TOOL_TEXTS,
) -> str:
    """Tools (ReAct only) + investigation context + history + the current question.

    `investigation_context` is the context's pieces; everything is joined once (see
    `investigation_context_parts` for why).
    """
    parts = [available_tools_preamble(tools, tool_texts), *investigation_context]
    if chat.history:
        parts.append("\n")
        parts.extend(chat_history_parts(chat.history))
    parts.append(format_current_task(chat.user_question))
    return "".join(parts)
