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


# The last history a chat message was built with, and the length of its text: the
# message's growth point (growth.py) is measured right after the build, and takes the
# length from here rather than formatting the history a second time. Held with the
# history itself, so an identity match is that very history.
_built: tuple[Sequence[ChatExchange], int] | None = None


def history_heading(count: int) -> str:
    """The heading of a history of `count` exchanges (it counts them)."""
    return (
        f"\n{SEPARATOR}\n💬 CHAT HISTORY ({count} previous exchange{'' if count == 1 else 's'})\n"
        f"{SEPARATOR}\n\n"
    )


def history_length(exchanges: Sequence[ChatExchange]) -> int:
    """`len(format_chat_history(exchanges))`, without formatting it again when the last
    chat message built was built with this history."""
    built = _built
    if built is not None and built[0] is exchanges:
        return built[1]
    return sum(map(len, chat_history_parts(exchanges)))


def chat_history_parts(exchanges: Sequence[ChatExchange]) -> list[str]:
    if not exchanges:
        return []
    parts = [history_heading(len(exchanges))]
    for number, exchange in enumerate(exchanges, start=1):
        parts.append(f"## Exchange {number}\n\n**USER:**\n{exchange.user_question}\n\n")
        for message in exchange.messages:
            heading = _HISTORY_HEADINGS.get(message.role)
            if heading is not None:
                parts.append(heading)
                parts.append(message.content)
                parts.append("\n\n")
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
    global _built
    parts = [available_tools_preamble(tools, tool_texts), *investigation_context]
    if chat.history:
        history = chat_history_parts(chat.history)
        _built = (chat.history, sum(map(len, history)))
        parts.append("\n")
        parts.extend(history)
    parts.append(format_current_task(chat.user_question))
    return "".join(parts)
