"""Small text helpers shared by the detectors."""

import re
from collections.abc import Mapping

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")

# Every replacement starts with this, so a detector can recognise text that is already
# masked (masking must be idempotent) and the LLM reads what kind of value was removed.
MASK_PREFIX = "[MASKED_"

# Characters of a key such as `DB_PASSWORD`, `spring.datasource.password`, `X-API-Key`
# (and letters beyond ASCII: `contraseña`, `hasło`; see `is_key_char`).
KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")


def is_key_char(char: str) -> bool:
    return char in KEY_CHARS or (char >= "\x80" and char.isalnum())


_PLACEHOLDER_WORDS = frozenset(
    {
        "true",
        "false",
        "null",
        "none",
        "nil",
        "yes",
        "no",
        "on",
        "off",
        "~",
        "undefined",
        "redacted",
        "hidden",
        "masked",
        "required",
        "optional",
        "string",
        "empty",
        "unset",
        "n/a",
    }
)
_FILLER = frozenset("*xX•.-_#?")
# `kubectl describe secret` prints sizes, not values: `DB_PASSWORD:  24 bytes`.
_SIZE_ONLY = re.compile(r"\d+ bytes")
# Masked already, or shown masked by the tool that printed it (`****************EKEY`).
_MASKED_STARTS = ("[MASKED_", "[REDACTED", "***", "…", "...")
# A reference to where the value is, as a whole value: `$VAR`, `${VAR}`, `$(cmd)`,
# `{{ .Values.x }}`, `<password>`, `%s`, `%(pw)s`, `%PASSWORD%`; a structure rather than a
# scalar (`{"valueFrom": ...}`, `["a", "b"]`). Only the whole value: `$ecr3t!` and
# `<S3cr` are secrets.
_REFERENCE = re.compile(
    r"\$(?:[{(].*|[A-Za-z_][A-Za-z0-9_]*)"
    r"|\{\{.*|\{[\s\"'{}].*|\{[^{}]*\}|\[[\s\"'\[\]{].*|\[[^\[\]]*\]"
    r"|<[^<>]*>|%[sd]|%\([A-Za-z_][A-Za-z0-9_]*\)s|%[A-Za-z_][A-Za-z0-9_]*%",
    re.DOTALL,
)


def is_placeholder(value: str) -> bool:
    """True when `value` is not a secret itself: empty, a flag, a reference or a mask."""
    stripped = value.strip()
    if not stripped:
        return True
    if stripped.startswith(_MASKED_STARTS) or _REFERENCE.fullmatch(stripped):
        return True
    if set(stripped) <= _FILLER or _SIZE_ONLY.fullmatch(stripped):
        return True
    return stripped.lstrip("([").rstrip(")],;.").lower() in _PLACEHOLDER_WORDS


_NOT_FILLER = re.compile(r"[^*xX•.\-_#?]")
_LONGEST_PLACEHOLDER_WORD = max(map(len, _PLACEHOLDER_WORDS))
_REFERENCE_FIRST = frozenset("${[<%")
# A reference is judged whole; beyond this length it is read as a secret's start only.
_LONGEST_REFERENCE = 512


def is_placeholder_span(view: "TextView", start: int, end: int) -> bool:
    """`is_placeholder(view.text[start:end])`, without copying a long value: a value may
    run to the end of a long line, past many other keys, and each of their values is
    decided by reading only its start (up to the next keyword at most) and the
    whitespace before its end (remembered by the view)."""
    text = view.text
    while start < end and text[start].isspace():
        start += 1
    end = max(start, view.space_run_start(end))
    if start == end:
        return True
    if text.startswith(_MASKED_STARTS, start, end):
        return True
    if text[start] in _REFERENCE_FIRST:
        if text.startswith(("${", "$(", "{{"), start, end):
            return True
        if end - start <= _LONGEST_REFERENCE and _REFERENCE.fullmatch(text, start, end):
            return True
    if _NOT_FILLER.search(text, start, end) is None or _SIZE_ONLY.fullmatch(text, start, end):
        return True
    # A word in parentheses or before the punctuation of a sentence: `(none)`, `(using
    # password: YES)`.
    while start < end and text[start] in "([":
        start += 1
    while end > start and text[end - 1] in ")],;.":
        end -= 1
    return (
        end - start <= _LONGEST_PLACEHOLDER_WORD and text[start:end].lower() in _PLACEHOLDER_WORDS
    )


def looks_random(value: str) -> bool:
    """A token-shaped value: long, or carrying a digit. Excludes plain English words."""
    if len(value) < 8:
        return False
    return len(value) >= 20 or any(c.isdigit() for c in value)


def looks_random_span(text: str, start: int, end: int) -> bool:
    """`looks_random(text[start:end])`, copying only a short value."""
    length = end - start
    if length < 8:
        return False
    return length >= 20 or any(c.isdigit() for c in text[start:end])


def occurrences(text: str, literal: str) -> list[int]:
    """Start positions of `literal` in `text`, case kept (`TextView.find_all` folds it)."""
    found = []
    pos = text.find(literal)
    while pos >= 0:
        found.append(pos)
        pos = text.find(literal, pos + 1)
    return found


def splice(text: str, edits: list[tuple[int, int, str]]) -> str:
    """`text` with each (start, end, replacement) applied; edits sorted, not overlapping."""
    parts: list[str] = []
    last = 0
    for start, end, replacement in edits:
        parts.append(text[last:start])
        parts.append(replacement)
        last = end
    parts.append(text[last:])
    return "".join(parts)


def drop_overlaps(edits: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """Sorted edits without the ones overlapping an earlier (leftmost, then longest) edit."""
    edits.sort(key=lambda e: (e[0], -e[1]))
    kept: list[tuple[int, int, str]] = []
    end = -1
    for edit in edits:
        if edit[0] >= end:
            kept.append(edit)
            end = edit[1]
    return kept


_LINE_BREAK = re.compile(r"\r?\n|\\r\\n|\\n")


def lines(text: str) -> list[tuple[int, int]]:
    """(start, end) of every line; JSON-escaped `\\n` sequences also break lines."""
    spans: list[tuple[int, int]] = []
    start = 0
    for match in _LINE_BREAK.finditer(text):
        spans.append((start, match.start()))
        start = match.end()
    spans.append((start, len(text)))
    return spans


class TextView:
    """A text being masked, with what is known or computed once about it.

    `known` maps a lower-case literal to its start positions in the text (ASCII case
    ignored), as the prefilter found them; other literals are searched on demand in an
    ASCII-lowered copy, and remembered.

    The detectors ask about the surroundings of each occurrence of their keyword (where
    its line ends, where the value after it stops). A text may repeat a keyword
    thousands of times on one line, so the answers that reach far are remembered
    (`next_at`, `blank_run_start`): the text is read once, not once per occurrence.
    """

    __slots__ = (
        "_blank_runs",
        "_line",
        "_lowered",
        "_next",
        "_positions",
        "_space_runs",
        "cache",
        "text",
    )

    def __init__(self, text: str, known: Mapping[str, list[int]] | None = None) -> None:
        self.text = text
        self._positions: dict[str, list[int]] = dict(known) if known else {}
        self._lowered: str | None = None
        # Per pattern: (from, to), the first match at or after `from` starts at `to`.
        self._next: dict[re.Pattern[str], tuple[int, int]] = {}
        self._blank_runs: dict[int, int] = {}
        self._space_runs: dict[int, int] = {}
        self._line = (0, -1)  # (start, end) of the last line asked about
        # Results several detectors need, computed by the first (e.g. keys by keyword).
        self.cache: dict[str, object] = {}

    @property
    def lowered(self) -> str:
        if self._lowered is None:
            # str.lower() can change the length of non-ASCII text ("İ" -> "i̇"), which
            # would shift every position; lowering only ASCII letters keeps them aligned.
            text = self.text
            self._lowered = text.lower() if text.isascii() else text.translate(_ASCII_LOWER)
        return self._lowered

    def find_all(self, literal: str) -> list[int]:
        """Start positions of `literal` (lower-case) in the text, ASCII case ignored."""
        found = self._positions.get(literal)
        if found is None:
            found = []
            lowered = self.lowered
            pos = lowered.find(literal)
            while pos >= 0:
                found.append(pos)
                pos = lowered.find(literal, pos + 1)
            self._positions[literal] = found
        return found

    def next_at(self, pattern: re.Pattern[str], pos: int) -> int:
        """Where the first match of `pattern` at or after `pos` starts (the text's
        length when there is none).

        `pattern` must decide a match at each position in constant time (a character,
        a short literal). The last answer per pattern is remembered: from any position
        between that question and its answer the answer is the same, so asking for
        each occurrence of a keyword along a long line reads the line once.
        """
        memo = self._next.get(pattern)
        if memo is not None and memo[0] <= pos <= memo[1]:
            return memo[1]
        match = pattern.search(self.text, pos)
        found = match.start() if match else len(self.text)
        self._next[pattern] = (pos, found)
        return found

    def line_end(self, pos: int) -> int:
        """End of the line holding `pos` (exclusive); a JSON-escaped `\\n` (or `\\r\\n`)
        breaks lines too, as in `lines`."""
        return self.next_at(_LINE_BREAK, pos)

    def line_start(self, pos: int) -> int:
        """Start of the line holding `pos` (a JSON-escaped `\\n` breaks lines too).

        The last line asked about is remembered, so the keys along one long line find
        its start once."""
        start, end = self._line
        if start <= pos <= end:
            return start
        text = self.text
        start = text.rfind("\n", 0, pos) + 1
        escaped = text.rfind("\\n", start, pos)
        if escaped >= 0 and escaped + 2 <= pos:
            start = escaped + 2
        self._line = (start, self.line_end(start))
        return start

    def blank_run_start(self, end: int) -> int:
        """Where the run of spaces and tabs that ends at `end` starts."""
        start = self._blank_runs.get(end)
        if start is None:
            text = self.text
            start = end
            while start > 0 and text[start - 1] in " \t":
                start -= 1
            self._blank_runs[end] = start
        return start

    def space_run_start(self, end: int) -> int:
        """Where the run of whitespace (`str.isspace`) that ends at `end` starts."""
        start = self._space_runs.get(end)
        if start is None:
            text = self.text
            start = end
            while start > 0 and text[start - 1].isspace():
                start -= 1
            self._space_runs[end] = start
        return start
