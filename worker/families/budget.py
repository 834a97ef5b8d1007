"""What a budget may cut from a job, in which order (CONTRACT.md §11): the shape of a
cut plan, and the list sections the families have in common.

Each family holds its own plans beside its builder (`plan_for` of its `Family`,
e.g. families/tarsy/budget_plans.py); the renderer's trimmer (render/budget/) carries
them out. A plan names the job's lists whose oldest items may be left out whole (in cut order, the
least important first) and the texts whose middle may be left out when that is not
enough. Whatever a plan does not name is never cut: system messages, instructions,
templates, tool catalogues, `chat.user_question`, the goal block, the rerun header. Only
material the kind actually renders is named, so every cut shortens the prompt.

Plans work on the job, not on the rendered text: the trimmed job goes through the
family's own builder, so a trimmed prompt is built by the very code (and to the very
format) of an untrimmed one, and a marker stands where the material was, as an item
of the same list (an event, an exchange, a line) or inside the shortened text.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from schemas.job import ChatExchange, TimelineEvent

# A path into a job: attribute names (models), keys (dicts) and indexes (lists).
Path = tuple[str | int, ...]

# Event types that hold conclusions: cut only after every other event (CONTRACT.md §11).
CONCLUSION_EVENTS = frozenset({"final_analysis", "executive_summary"})
# The event type of a marker standing for left-out events; the formatters label an
# unknown type by its name ("### left out", "**left out:**").
MARKER_EVENT_TYPE = "left_out"

ItemTexts = list[tuple[Path, str]]


def _never(item: Any) -> bool:
    return False


def _no_parts(item: Any) -> list[str] | None:
    return None


@dataclass(frozen=True, slots=True)
class ListSection:
    """A list whose oldest items may be left out whole; its last item never is."""

    name: str  # as reported in meta.budget.elisions, e.g. "chat.history"
    path: Path
    noun: str  # what one item is called in the marker
    marker: Callable[[str], Any]  # an item holding the marker text
    piece: Callable[[Any], str]  # an item's text, for its size
    texts: Callable[[Any], ItemTexts]  # an item's texts a middle cut may shorten
    last_resort: Callable[[Any], bool] = _never  # items cut only after all others
    # The texts whose concatenation is `piece`, when it is made of several that the
    # prompt shows apart (an exchange's question and answers); None: `piece` is one.
    parts: Callable[[Any], list[str] | None] = _no_parts


@dataclass(frozen=True, slots=True)
class Plan:
    lists: tuple[ListSection, ...] = ()
    texts: tuple[tuple[str, Path], ...] = ()  # (name, path) of texts a middle cut may shorten


def _event_marker(text: str) -> TimelineEvent:
    return TimelineEvent(event_type=MARKER_EVENT_TYPE, content=text)


def _event_piece(event: TimelineEvent) -> str:
    return event.content


def _event_texts(event: TimelineEvent) -> ItemTexts:
    return [(("content",), event.content)]


def _is_conclusion(event: TimelineEvent) -> bool:
    return event.event_type in CONCLUSION_EVENTS


def events_section(name: str, path: Path) -> ListSection:
    """A list of timeline events: conclusions go last."""
    return ListSection(
        name, path, "event", _event_marker, _event_piece, _event_texts, _is_conclusion
    )


def _exchange_marker(text: str) -> ChatExchange:
    return ChatExchange(user_question=text, messages=[])


def _exchange_piece(exchange: ChatExchange) -> str:
    return exchange.user_question + "".join(m.content for m in exchange.messages)


def _exchange_parts(exchange: ChatExchange) -> list[str]:
    return [exchange.user_question, *(m.content for m in exchange.messages)]


def _exchange_texts(exchange: ChatExchange) -> ItemTexts:
    texts: ItemTexts = [(("user_question",), exchange.user_question)]
    texts.extend((("messages", i, "content"), m.content) for i, m in enumerate(exchange.messages))
    return texts


NOTHING = Plan()


def history_section(name: str, path: Path) -> ListSection:
    """A list of chat exchanges, each counted as its question and answers joined."""
    return ListSection(
        name,
        path,
        "exchange",
        _exchange_marker,
        _exchange_piece,
        _exchange_texts,
        parts=_exchange_parts,
    )
