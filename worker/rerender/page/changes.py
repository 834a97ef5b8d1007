"""What a changed job's change is, for the drift page: a signature and a readable diff.

A template edit makes the same change in thousands of jobs whose messages otherwise
differ (job ids, alerts, tool lists). Two jobs make the *same change* when each message
that differs loses and gains the same lines, wherever those lines sit and whatever
surrounds them. `change_signature` hashes exactly that (the roles, and the removed and
added lines of every hunk), so the page can show each distinct change once.

`Change.example` is the diff of one job, as rows the page draws:
  * `["=", text]` an unchanged line shown as context;
  * `["-", text, words, noeol]` / `["+", text, words, noeol]` a removed / added line;
    `words` is 0, or the line cut into alternate unchanged and changed pieces
    (`[same, changed, same, ...]`, starting with an unchanged one, maybe empty) for
    word-level highlighting; `noeol` is 1 when the line has no newline at its end; a
    fifth item, the line's length, says that `text` is only its beginning;
  * `["~", count, text]` a folded stretch of `count` unchanged lines, `text` the lines
    joined by newlines, or None when the page had no room for them.
"""

import difflib
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from worker.rerender.drift import split_keeping_ends

Messages = Sequence[dict[str, str]]
Row = list[Any]

ABSENT = "absent"
# Unchanged lines shown around a change; longer unchanged stretches are folded.
CONTEXT = 3
# Summary lines in the list of changes are cut to this many characters.
SUMMARY_CHARS = 160
# Word-level highlighting is skipped for lines longer than this (and for pairs of lines
# too different for it to help).
WORD_DIFF_MAX_CHARS = 4000
WORD_DIFF_MIN_RATIO = 0.4
_TOKEN = re.compile(r"\w+|\s+|[^\w\s]", re.UNICODE)

Opcode = tuple[str, int, int, int, int]


def line_opcodes(a: Sequence[str], b: Sequence[str]) -> list[Opcode]:
    """difflib opcodes turning lines `a` into `b`.

    The common head and tail are taken off first: a template edit usually touches a few
    lines of a long message, and the matcher then only sees the part that moved.
    """
    shortest = min(len(a), len(b))
    head = 0
    while head < shortest and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < shortest - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    middle = difflib.SequenceMatcher(None, a[head : len(a) - tail], b[head : len(b) - tail])
    ops: list[Opcode] = [("equal", 0, head, 0, head)] if head else []
    for tag, i1, i2, j1, j2 in middle.get_opcodes():
        ops.append((tag, i1 + head, i2 + head, j1 + head, j2 + head))
    if tail:
        ops.append(("equal", len(a) - tail, len(a), len(b) - tail, len(b)))
    return ops


@dataclass(slots=True)
class MessageChange:
    """One message that differs: its lines and how they changed."""

    index: int
    role_before: str
    role_after: str
    before: list[str]
    after: list[str]
    ops: list[Opcode]

    def hunks(self) -> list[tuple[list[str], list[str]]]:
        """The removed and added lines of each change, without position or context."""
        return [
            (self.before[i1:i2], self.after[j1:j2])
            for tag, i1, i2, j1, j2 in self.ops
            if tag != "equal"
        ]


def message_changes(before: Messages, after: Messages) -> list[MessageChange]:
    """The messages that differ between `before` and `after`, in order."""
    changes = []
    for index in range(max(len(before), len(after))):
        old = before[index] if index < len(before) else None
        new = after[index] if index < len(after) else None
        if old == new:
            continue
        old_lines = split_keeping_ends(old["content"]) if old is not None else []
        new_lines = split_keeping_ends(new["content"]) if new is not None else []
        changes.append(
            MessageChange(
                index,
                old["role"] if old is not None else ABSENT,
                new["role"] if new is not None else ABSENT,
                old_lines,
                new_lines,
                line_opcodes(old_lines, new_lines),
            )
        )
    return changes


def change_signature(changes: Sequence[MessageChange]) -> str:
    """A short hash naming the change: equal for jobs that lost and gained the same lines."""
    digest = hashlib.blake2b(digest_size=8)
    for change in changes:
        digest.update(b"\x00M" + change.role_before.encode() + b"\x00" + change.role_after.encode())
        for removed, added in change.hunks():
            digest.update(b"\x00H")
            for marker, lines in ((b"\x00-", removed), (b"\x00+", added)):
                for line in lines:
                    digest.update(marker + line.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def word_pieces(old: str, new: str) -> tuple[list[str], list[str]] | None:
    """Both lines cut into alternate unchanged and changed pieces, or None when a word
    diff would not help (lines too long or too different)."""
    if len(old) > WORD_DIFF_MAX_CHARS or len(new) > WORD_DIFF_MAX_CHARS:
        return None
    a, b = _TOKEN.findall(old), _TOKEN.findall(new)
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    if matcher.ratio() < WORD_DIFF_MIN_RATIO:
        return None
    spans = [
        (tag != "equal", "".join(a[i1:i2]), "".join(b[j1:j2]))
        for tag, i1, i2, j1, j2 in matcher.get_opcodes()
    ]
    # A space kept between two changed words would cut one change into many marks.
    for k in range(1, len(spans) - 1):
        changed, old_text, _ = spans[k]
        if not changed and old_text.isspace() and spans[k - 1][0] and spans[k + 1][0]:
            spans[k] = (True, old_text, old_text)
    old_pieces, new_pieces = [""], [""]
    for changed, old_text, new_text in spans:
        for pieces, text in ((old_pieces, old_text), (new_pieces, new_text)):
            # Odd positions hold changed text: open a new piece whenever the kind flips.
            if (len(pieces) % 2 == 0) != changed:
                pieces.append("")
            pieces[-1] += text
    return old_pieces, new_pieces


def _shown(line: str) -> tuple[str, int]:
    """A line as the page shows it: without its newline, and whether it had none."""
    return (line[:-1], 0) if line.endswith("\n") else (line, 1)


class _Example:
    """Builds the rows of an example within a budget of characters of text.

    Changed lines are placed first; the text of folded stretches is filled in
    afterwards, in order, while room is left (a fold without it only shows its count).
    """

    def __init__(self, chars: int) -> None:
        self.left = chars
        self.cut = False
        self._folds: list[tuple[Row, str]] = []

    def changed(self, change: MessageChange, op: Opcode, out: list[Row]) -> None:
        _, i1, i2, j1, j2 = op
        removed = [_shown(line) for line in change.before[i1:i2]]
        added = [_shown(line) for line in change.after[j1:j2]]
        removed_words: list[Any] = [0] * len(removed)
        added_words: list[Any] = [0] * len(added)
        # Pair the k-th removed line with the k-th added one, as a reader does.
        for k in range(min(len(removed), len(added))):
            pieces = word_pieces(removed[k][0], added[k][0])
            if pieces is not None:
                removed_words[k], added_words[k] = pieces
        for marker, lines, words in (("-", removed, removed_words), ("+", added, added_words)):
            for (text, noeol), pieces in zip(lines, words, strict=True):
                if len(text) <= self.left:
                    self.left -= len(text)
                    out.append([marker, text, pieces, noeol])
                else:  # cut: the fifth item is the line's full length
                    self.cut = True
                    shown, self.left = text[: self.left], 0
                    out.append([marker, shown, 0, noeol, len(text)])

    def equal(self, lines: list[str], first: bool, last: bool, out: list[Row]) -> None:
        """An unchanged stretch: context next to changes, the rest folded."""
        head = 0 if first else CONTEXT
        tail = 0 if last else CONTEXT
        if len(lines) <= head + tail + 1:
            head, tail = len(lines), 0
        shown = [_shown(line)[0] for line in lines]
        context = sum(map(len, shown[:head])) + sum(map(len, shown[len(shown) - tail :]))
        if context <= self.left:
            self.left -= context
        else:  # no room even for the context: fold the whole stretch
            self.cut = True
            head = tail = 0
        out.extend(["=", text] for text in shown[:head])
        folded = shown[head : len(shown) - tail]
        if folded:
            row: Row = ["~", len(folded), None]
            self._folds.append((row, "\n".join(folded)))
            out.append(row)
        out.extend(["=", text] for text in shown[len(shown) - tail :])

    def rows(self, change: MessageChange) -> list[Row]:
        rows: list[Row] = []
        last = len(change.ops) - 1
        for number, op in enumerate(change.ops):
            tag, i1, i2, _, _ = op
            if tag == "equal":
                self.equal(change.before[i1:i2], number == 0, number == last, rows)
            else:
                self.changed(change, op, rows)
        return rows

    def fill_folds(self) -> None:
        for row, text in self._folds:
            if len(text) <= self.left:
                self.left -= len(text)
                row[2] = text
            else:
                self.cut = True
        self._folds.clear()


@dataclass(slots=True)
class Change:
    """A changed job's change: signature, a one-line summary, and its diff rows."""

    signature: str
    # Messages that differ, lines removed and added over all of them.
    messages: int
    removed: int
    added: int
    summary: dict[str, Any]
    example: list[dict[str, Any]] = field(default_factory=list)
    # Characters of text in `example`, and whether some had to be left out.
    example_chars: int = 0
    example_cut: bool = False


def _first(lines: list[str]) -> str:
    for line in lines:
        text = line.strip()
        if text:
            return text[:SUMMARY_CHARS]
    return ""


def describe_change(changes: Sequence[MessageChange], example_chars: int) -> Change:
    """The change made of `changes` (see `message_changes`), with a diff holding at most
    `example_chars` characters of text (changed lines first; folded context only if room
    is left)."""
    hunks = [hunk for change in changes for hunk in change.hunks()]
    removed = [line for old, _ in hunks for line in old]
    added = [line for _, new in hunks for line in new]
    roles = sorted({change.role_after if change.role_after != ABSENT else change.role_before
                    for change in changes})  # fmt: skip
    summary = {"roles": roles, "minus": _first(removed), "plus": _first(added)}
    builder = _Example(example_chars)
    example = [
        {
            "index": change.index,
            "before": change.role_before,
            "after": change.role_after,
            "rows": builder.rows(change),
        }
        for change in changes
    ]
    builder.fill_folds()
    return Change(
        signature=change_signature(changes),
        messages=len(changes),
        removed=len(removed),
        added=len(added),
        summary=summary,
        example=example,
        example_chars=example_chars - builder.left,
        example_cut=builder.cut,
    )
