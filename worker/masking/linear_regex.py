"""Regular expressions that run in time linear in the text: RE2, for whole-text scans.

Python's `re` backtracks: a search or `finditer` retries the pattern from every start
position, and a pattern whose repetition can fail at the end of a long run (a JWT's
`[A-Za-z0-9_-]{4,}\\.` over a run of key characters holding many `eyJ`) costs the run
length at each start, which is quadratic in the text. RE2 (the `google-re2` wheel)
simulates the automaton instead: one pass, whatever the text repeats. It has no
look-around and no back-references, which the masking patterns do not need.

The wheel's binding encodes a `str` to UTF-8 on every call, so a call costs the whole
text: RE2 is for one scan per text (`finditer`, `search`), not for matching at many
positions (the detectors use `re` there, with patterns that only read what lies between
the position and the next occurrence of their keyword).
"""

from collections.abc import Callable
from typing import Any, TypeVar

import re2

_T = TypeVar("_T")


def _encodable(text: str) -> str:
    """`text` with lone surrogates (which UTF-8 cannot carry, and JSON can) replaced by
    U+FFFD: one character for one, so every position stays where it was."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


# The only characters outside ASCII that Unicode case folding (RE2's, when it ignores
# case) maps onto an ASCII letter: KELVIN SIGN (k) and LONG S (s). The prefilter's
# engines fold ASCII only, so a pattern ignoring case does not see them as letters
# either (they are replaced one for one): a pattern then never matches where its
# literal anchor is absent.
_FOLDS_TO_ASCII = {0x212A: 0xFFFD, 0x017F: 0xFFFD}


class LinearPattern:
    """A compiled RE2 pattern, with what masking asks of a pattern."""

    __slots__ = ("_compiled", "_ignore_case", "groupindex", "pattern")

    def _subject(self, text: str) -> str:
        if self._ignore_case and not text.isascii():
            return text.translate(_FOLDS_TO_ASCII)
        return text

    def __init__(self, pattern: str, *, ignore_case: bool = False) -> None:
        """Raises `error` with RE2's message when RE2 cannot compile `pattern`."""
        options = re2.Options()
        options.case_sensitive = not ignore_case
        options.log_errors = False
        self._compiled: Any = re2.compile(pattern, options)
        self._ignore_case = ignore_case
        self.pattern = pattern
        self.groupindex: dict[str, int] = dict(self._compiled.groupindex)

    def _run(self, method: Callable[[str], _T], text: str) -> _T:
        """`method` of the compiled pattern on `text`, as RE2 can read it."""
        text = self._subject(text)
        try:
            return method(text)
        except UnicodeEncodeError:  # lone surrogates
            return method(_encodable(text))

    def spans(self, text: str, group: int | str = 0) -> list[tuple[int, int]]:
        """(start, end) of `group` in each match, leftmost first, matches not
        overlapping (as `re.finditer`); (-1, -1) where the group took no part."""
        index = self.groupindex[group] if isinstance(group, str) else group
        return self._run(
            lambda t: [match.span(index) for match in self._compiled.finditer(t)], text
        )

    def search(self, text: str) -> bool:
        """Whether the pattern matches anywhere in `text`."""
        return self._run(lambda t: self._compiled.search(t) is not None, text)

    def fullmatch(self, text: str) -> bool:
        return self._run(lambda t: self._compiled.fullmatch(t) is not None, text)


class LinearSet:
    """Several RE2 patterns searched for in one pass (`RE2::Set`): which of them match
    a text, in time linear in the text whatever number of patterns there are."""

    __slots__ = ("_set",)

    def __init__(self, patterns: list[tuple[str, bool]]) -> None:
        """`patterns`: (pattern, ignore case) each; a match reports its index here."""
        options = re2.Options()
        options.log_errors = False
        self._set: Any = re2.Set.SearchSet(options)
        for pattern, ignore_case in patterns:
            if ignore_case:
                # The prefilter's engines fold ASCII case only: a letter beyond ASCII
                # keeps its case (`Ł` is no `ł`), and so does what folds into ASCII
                # (`_FOLDS_TO_ASCII`, replaced in the text).
                pattern = (
                    "(?i:" + "".join(c if c.isascii() else f"(?-i:{c})" for c in pattern) + ")"
                )
            self._set.Add(pattern if ignore_case else f"(?:{pattern})")
        self._set.Compile()

    def matching(self, text: str) -> list[int]:
        """The indexes of the patterns matching somewhere in `text`."""
        if not text.isascii():
            text = _encodable(text.translate(_FOLDS_TO_ASCII))
        return self._set.Match(text) or []


error = re2.error


def describe(exc: Exception) -> str:
    """RE2's message for a pattern it refused, as text."""
    message = exc.args[0] if exc.args else exc
    return message.decode("utf-8", "replace") if isinstance(message, bytes) else str(message)
