"""Counting a prompt exactly from pieces counted once (CONTRACT.md §11, docs/BUDGETS.md).

A trimmed prompt is mostly the job's own texts (events, exchanges) in the builder's
framing. Counting each kept text while choosing the cut and then the whole prompt again
to verify it tokenizes the kept material twice. This module counts the prompt from the
texts' counts instead, and stays exact.

Token counts are not additive in general: tiktoken splits a text into chunks by a
regular expression, then encodes each chunk alone, and a chunk can cross the seam of
two joined texts ("a" + "b" is one chunk). For the expressions of cl100k_base and
o200k_base they are additive at a *line seam*: where the left text ends with "\\n" and
the right one starts with a character that is neither whitespace nor "/". No chunk
crosses it (the alternatives that take a newline take whitespace or newlines after it,
and o200k_base's punctuation run `[\\r\\n/]*` a slash, which is why "/" is excluded),
and the chunks before it are those of the left text alone (the whitespace run that
ends in the newline is one chunk either way: `\\s++$` alone or `\\s*[\\r\\n]` before a
visible character in cl100k_base, `\\s*[\\r\\n]+` in both places in o200k_base); neither
expression looks behind a position, so the chunks after it are those of the right text
alone. tests/render/budget/test_pieces.py checks this against tiktoken for both
encodings over random texts, and that it fails at other seams.

So each text is split at its first and last line seam into head, body and tail; the
three are counted (their sum is the text's exact count) and the body's count is kept.
The seams around a body lie inside its own text, so wherever the text appears verbatim
in a prompt, its body's count adds up exactly: the prompt is counted as the bodies'
counts plus the tokenized rest (framing, tails, markers, whatever is not found; heads
too, unless the prompt starts the text on a line of its own). Several texts shown
apart but counted as one piece (an exchange) are counted joined, with each text's body
kept the same way (`count_joined`). A tokenizer whose expression is not known to be
additive at line seams (`line_seams` false: the estimate, whose ceil() is not) counts
whole.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from worker.render.budget.tokenizers import Tokenizer

Messages = list[dict[str, str]]

# Texts (and bodies) shorter than this are counted whole: splitting and finding them
# again would cost more than tokenizing them twice.
MIN_BODY = 64
# How many newlines are tried when looking for a text's first or last line seam: a text
# of blank lines has none worth finding.
SEAM_TRIES = 32


@dataclass(slots=True)
class _Body:
    start: int  # the body is text[start:end]
    end: int
    tokens: int  # the body's count
    total: int | None  # the whole text's count, when counted on its own
    head: int | None = None  # text[:start]'s count, when counted on its own
    tail: int | None = None  # text[end:]'s count, when counted on its own


def line_seam_at(text: str, index: int) -> bool:
    """Whether `text` may be split before `index` with additive counts."""
    return (
        0 < index < len(text)
        and text[index - 1] == "\n"
        and not text[index].isspace()
        and text[index] != "/"
    )


def body_span(text: str) -> tuple[int, int]:
    """(start, end) of `text` between its first and last line seam; start == end when it
    has fewer than two."""
    start = -1
    newline = text.find("\n")
    for _ in range(SEAM_TRIES):
        if newline < 0:
            break
        if line_seam_at(text, newline + 1):
            start = newline + 1
            break
        newline = text.find("\n", newline + 1)
    if start < 0:
        return 0, 0
    end = -1
    newline = text.rfind("\n", start)
    for _ in range(SEAM_TRIES):
        if newline < start:
            break
        if line_seam_at(text, newline + 1):
            end = newline + 1
            break
        newline = text.rfind("\n", start, newline)
    if end <= start:
        return 0, 0
    return start, end


class PieceCounter:
    """Counts texts once each and prompts from those counts, exactly."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.composes = tokenizer.line_seams
        self._bodies: dict[str, _Body] = {}
        self._totals: dict[str, int] = {}

    def count(self, text: str) -> int:
        """The exact count of `text`, tokenized on the first call only."""
        body = self._bodies.get(text)
        if body is not None:
            if body.total is None:
                body.head, body.tail = self.tokenizer.count_many(
                    [text[: body.start], text[body.end :]]
                )
                body.total = body.head + body.tokens + body.tail
            return body.total
        total = self._totals.get(text)
        if total is not None:
            return total
        start, end = body_span(text) if self.composes and len(text) >= MIN_BODY else (0, 0)
        if end - start < MIN_BODY:
            total = self._totals[text] = self.tokenizer.count(text)
            return total
        head, tokens, tail = self.tokenizer.count_many([text[:start], text[start:end], text[end:]])
        self._bodies[text] = _Body(start, end, tokens, head + tokens + tail, head, tail)
        return head + tokens + tail

    def count_joined(self, parts: Sequence[str]) -> int:
        """The exact count of `parts` joined, each part's body kept for `prompt`: the
        seams around a body lie inside its part, so they are line seams of the join."""
        if len(parts) == 1:
            return self.count(parts[0])
        if not self.composes:
            return self.tokenizer.count("".join(parts))
        loose: list[str] = []
        bodies: list[tuple[str, int, int]] = []
        pending: list[str] = []
        for part in parts:
            known = self._bodies.get(part)
            if known is not None:
                start, end = known.start, known.end
            else:
                start, end = body_span(part) if len(part) >= MIN_BODY else (0, 0)
            if end - start < MIN_BODY:
                pending.append(part)
                continue
            pending.append(part[:start])
            loose.append("".join(pending))
            pending = [part[end:]]
            bodies.append((part, start, end))
        loose.append("".join(pending))
        # Each new body once, however often its part recurs in the join.
        new = {part: (start, end) for part, start, end in bodies if part not in self._bodies}
        counts = self.tokenizer.count_many(
            loose + [part[start:end] for part, (start, end) in new.items()]
        )
        for (part, (start, end)), tokens in zip(new.items(), counts[len(loose) :], strict=True):
            self._bodies[part] = _Body(start, end, tokens, None)
        return sum(counts[: len(loose)]) + sum(self._bodies[part].tokens for part, _, _ in bodies)

    def prompt(self, messages: Messages, groups: Sequence[Sequence[str]] = ()) -> int:
        """The exact size of `messages` (CONTRACT.md §11: the sum of the contents' counts).
        `groups` are texts counted before that the messages may hold verbatim, each group
        in the order the prompt shows them; a text not found is simply tokenized."""
        return sum(self.message_counts(messages, groups))

    def message_counts(self, messages: Messages, groups: Sequence[Sequence[str]] = ()) -> list[int]:
        """The exact count of each message's content (see `prompt`)."""
        counts: list[int] = []
        for message in messages:
            content = message["content"]
            if not self._bodies or len(content) < MIN_BODY:
                counts.append(self.count(content))
                continue
            found: list[tuple[int, int, int]] = []
            for group in groups:
                position = 0
                for text in group:
                    body = self._bodies.get(text)
                    if body is None:
                        continue
                    at = content.find(text, position)
                    if at < 0:
                        continue
                    position = at + len(text)
                    start, end, tokens = at + body.start, at + body.end, body.tokens
                    # Where the prompt puts the text itself at a line seam (after a
                    # newline, or before a visible character), its head or tail counts
                    # there as counted alone: one line less to tokenize again.
                    if body.head is not None and (at == 0 or line_seam_at(content, at)):
                        start, tokens = at, tokens + body.head
                    if body.tail is not None and (
                        position == len(content) or line_seam_at(content, position)
                    ):
                        end, tokens = position, tokens + body.tail
                    found.append((start, end, tokens))
            found.sort()
            cursor = 0
            total = 0
            loose: list[str] = []
            for start, end, tokens in found:
                if start < cursor:
                    continue  # overlaps a body already used (a text found twice)
                loose.append(content[cursor:start])
                total += tokens
                cursor = end
            loose.append(content[cursor:])
            # Through count(): what is the same in every candidate (a system message,
            # the framing before the first body) is tokenized for the first one only.
            counts.append(total + sum(self.count(text) for text in loose))
        return counts
