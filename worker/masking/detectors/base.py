"""What every detector is made of, the fragments they share, and the one table they
register in.

A detector is a name (a `meta.masked` key and a metrics label), the literal anchors of
which at least one occurs in anything it can mask, and a function from text to masked
text. The anchors let the masker skip a detector on every text without one (the common
case: most text holds no secret). Each family module registers its detectors here;
`worker.masking.detectors` puts them in the order they run.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass

from worker.masking.linear_regex import LinearPattern
from worker.masking.text import MASK_PREFIX, TextView, drop_overlaps, splice

# (start, end, replacement): what a detector would write over text[start:end].
Edit = tuple[int, int, str]
Apply = Callable[[TextView], list[Edit]]
Pattern = re.Pattern[str] | LinearPattern


# Whether a pattern matches, decided at the (ascending) start positions of its
# literal's occurrences in a text.
Confirm = Callable[[str, list[int]], bool]


@dataclass(frozen=True, slots=True)
class Split:
    """How an engine that finds literals fast decides an anchor's pattern faster.

    The pattern matches a text iff `quick` matches it (when given: every match of
    `quick` is a match of the pattern) or `confirm` holds at the occurrences of the
    anchor's literal (and then `candidate`, when given, matches too). For patterns
    whose literal is not where a match starts, which Hyperscan cannot lead with:
    `--[key]*token[key]*[ \t]` scanned as a pattern cost as much as all the other
    anchors together.
    """

    quick: str | None
    confirm: Confirm
    # A pattern every match of the confirmed part lies within, scanned instead of the
    # bare literal: prose mentions of a keyword then cost no confirmation.
    candidate: str | None = None


@dataclass(frozen=True, slots=True)
class Anchor:
    """A necessary condition of a detector's matches: `literal` occurs, and when given,
    `pattern` (a regex holding the literal) matches too.

    Ops text mentions "token" and "secret" all the time; a pattern such as "a key
    holding `token` followed by `:` or `=`" lets the prefilter discard those mentions
    in the same pass, so the detector only runs where a match is plausible. Patterns
    use the syntax Python's `re` and Hyperscan share (no look-around, no back-refs),
    and never match a NUL: the prefilter joins a job's texts with NUL separators, and
    a match across two texts would be credited to the wrong one. `split` is the same
    condition in a form that is cheaper for Hyperscan (the Python engine ignores it);
    a property test checks that both say the same.
    """

    literal: str
    caseless: bool = True
    pattern: str | None = None
    split: Split | None = None


KEY_TAIL = r"[A-Za-z0-9_.\-]*"
QUOTE = r"(?:\\{0,3}[\"'])?"  # as in keys._SEPARATOR
LOOSE_QUOTE = r"\\{0,3}[\"']?"  # as in the regexes of the detectors
# ASCII whitespace, which `\s` is in every engine but RE2 (it leaves out \v).
SPACE = r" \t\n\r\x0b\x0c"

SECRETS = "secrets"
PII = "pii"
GROUPS = (SECRETS, PII)
DEFAULT_GROUPS = (SECRETS,)


@dataclass(frozen=True, slots=True)
class Detector:
    name: str
    group: str
    replacement: str  # the main replacement, for documentation and `prompt-worker mask`
    anchors: tuple[Anchor, ...]  # empty: runs on every text
    apply: Apply


@dataclass(frozen=True, slots=True)
class Applied:
    """What a detector's edits did to a text: the new text, the edits kept (sorted, not
    overlapping, in the old text's positions) and how many values they masked."""

    text: str
    edits: list[Edit]
    count: int


def apply_edits(text: str, edits: list[Edit]) -> Applied:
    """`text` with `edits` applied: no-ops left out, the leftmost (then longest) of
    overlapping edits kept.

    An edit counts the masks it adds: one, or more for an edit that rewrites a nested
    document (a Secret escaped in a JSON string), never less than one.
    """
    # An edit that changes nothing is no edit (compared without copying the span: the
    # spans of overlapping edits may each run to the end of a long line).
    edits = [e for e in edits if not (e[1] - e[0] == len(e[2]) and text.startswith(e[2], e[0]))]
    if not edits:
        return Applied(text, [], 0)
    edits = drop_overlaps(edits)
    count = 0
    for start, end, replacement in edits:
        added = replacement.count(MASK_PREFIX)
        if added > 1:
            added -= text.count(MASK_PREFIX, start, end)
        count += max(1, added)
    return Applied(splice(text, edits), edits, count)


def regex_detector(
    patterns: Pattern | tuple[Pattern, ...],
    replacement: str,
    group: str | int = 0,
    *,
    word_start: bool = False,
) -> Apply:
    """Replace `group` of every match of `patterns`.

    Each pattern starts with a literal, which Python's `re` finds quickly; a leading
    `\\b` or alternation would make it try every position (measured ~20x slower), so
    `word_start` checks the word boundary in code instead. A pattern that could fail
    late after a run its literal repeats in (`eyJ` in a long run of base64url) is a
    `LinearPattern`: `re` would read the run again from each occurrence.
    """
    compiled = patterns if isinstance(patterns, tuple) else (patterns,)

    def apply(view: TextView) -> list[Edit]:
        text = view.text
        edits = []
        for pattern in compiled:
            if isinstance(pattern, LinearPattern):
                spans = pattern.spans(text, group)
            else:
                spans = [match.span(group) for match in pattern.finditer(text)]
            for start, end in spans:
                if (
                    word_start
                    and start > 0
                    and (text[start - 1].isalnum() or text[start - 1] == "_")
                ):
                    continue
                if end > start and not text.startswith(MASK_PREFIX, start):
                    edits.append((start, end, replacement))
        return edits

    return apply


def chain(*parts: Apply) -> Apply:
    """The edits of every part, each run on the same text (where two overlap, the
    leftmost, then longest, is applied)."""

    def apply(view: TextView) -> list[Edit]:
        edits: list[Edit] = []
        for part in parts:
            edits.extend(part(view))
        return edits

    return apply


# Every built-in detector by name, as its family module registered it.
REGISTERED: dict[str, Detector] = {}


def register(*detectors: Detector) -> None:
    for detector in detectors:
        if detector.name in REGISTERED:
            raise ValueError(f"two detectors named {detector.name!r}")
        REGISTERED[detector.name] = detector
