"""Where a value ends, and whether what stands there is a credential at all.

One rule, for every detector that masks "the value after a key" and for the command
lines and file formats that hand a value over the same way (docs/MASKING.md, "Where a
value ends"):

* a quoted value runs to its closing quote, escapes honoured (`\\"` does not close
  `"`); without one, to the end of its line;
* an unquoted value runs to whitespace or the end of its line. JSON's escaped blanks
  (`\\n`, `\\r`, `\\t`) are whitespace and an escaped quote (`\\"`) ends the JSON string
  the value is written in; inside a double-quoted string (a `key=value` in a JSON
  string or in a shell's double quotes) the quote that closes the string ends it too;
* in a URL's query or fragment (the key right after `?`, `&` or `#`) `&`, `;` and `#`
  end it, and so does what a URL never holds (`"`, `'`, `<`, `>`, `\\`); in a
  connection string's field (the key right after `;`) `;` ends it;
* where the key starts a line of YAML, INI or Java properties (`key: value`,
  `key = value`, `key value`) the value is the rest of the line, less a ` #` comment;
  in a table cell (`| key | value |`) it runs to the next `|`; in columns (a tab, or
  two blanks or more) to the next column.

Anything else inside the value is part of it: `Tr0ub4dor&3` is one value, and so is
`TbVsE&N+6GR@NK`. When in doubt, more is masked.
"""

import re
from enum import Enum

from worker.masking.text import MASK_PREFIX, TextView, is_placeholder_span

# How much a value found after a key must prove: nothing more than not being a
# placeholder (after `=`, a quoted key, a flag); not reading as prose either (after
# `:` or a blank, where sentences go on: "token: signature is invalid"); and looking
# like a secret besides, where nothing but the key's shape says it is a mapping
# (`aws_secret_access_key wJalr...` in the middle of a line).
STRONG, LOOSE, SHAPED = 0, 1, 2
BLOCK = 3  # a YAML block scalar's lines: STRONG, and no key inside them is one
Found = tuple[int, int, int]  # (start, end, strength) of a value


class Form(Enum):
    """How a value is written, which decides where it ends."""

    WORD = "word"  # to whitespace
    SCALAR = "scalar"  # the rest of the line, less a comment
    LINE = "line"  # the rest of the line (Java properties: `#` is no comment there)
    URL_PARAM = "url_param"  # in a URL's query or fragment
    FIELD = "field"  # a connection string's field (`;Pwd=x;`)
    CELL = "cell"  # a table cell, to the next `|`
    COLUMN = "column"  # to the next tab or run of two blanks
    XML = "xml"  # an element's text, to the next tag


# Where values stop, one character (or escape) each: `TextView.next_at` patterns.
_WORD_STOP = re.compile(r"\s|\\[nrt]")
_URL_STOP = re.compile(r"[\s&;#\"'<>\\]")
_FIELD_STOP = re.compile(r"[\s;]|\\[nrt]")
_CELL_STOP = re.compile(r"\|")
_COLUMN_STOP = re.compile(r"\t|  ")
_TAG = re.compile(r"<")
_JSON_BLANK = re.compile(r"\\[nrt]")
_ESCAPED_QUOTE = re.compile(r'\\"')
_BLANK_HASH = re.compile(r"[ \t]#")  # a YAML or INI comment starts at the blanks before `#`
_DQ_VALUE = re.compile(r'(?:[^"\\\n]|\\[^\n])*')
_QUOTE_OR_ESCAPE = re.compile(r'\\.|"')


def quoted_end(view: TextView, start: int, quote: str) -> int:
    """End (exclusive) of a quoted value starting at `start`; the line's end if unclosed.

    `quote` is the opening quote as written: `"`, `'`, an escaped `\\"` inside JSON, or
    `{` (a braced ODBC value, closed by `}`).
    """
    text = view.text
    stop = view.line_end(start)
    if quote == '"':
        # Stops at the first unescaped `"`: the opening quote of the next key's value
        # at the latest, so the values of several keys are never read twice.
        match = _DQ_VALUE.match(text, start)
        end = match.end() if match else start
        return end if text.startswith('"', end) else stop
    close = "}" if quote == "{" else quote
    if close == "'":
        # A backslash escapes the quote (shell's `$'...'`, Python), and so does a
        # doubled quote (SQL, YAML's single-quoted style: `'it''s'`).
        pos = start
        while True:
            end = text.find("'", pos, stop)
            if end < 0:
                return stop
            if text.startswith("'", end + 1):
                pos = end + 2
            elif _escaped_before(text, end):
                pos = end + 1
            else:
                return end
    end = text.find(close, start, stop)
    return end if end >= 0 else stop


class _StringScan:
    """How far the double quotes of one line have been read (see `string_end`)."""

    __slots__ = ("close", "inside", "line_end", "scanned")

    def __init__(self, scanned: int, line_end: int) -> None:
        self.scanned = scanned  # quotes are counted up to here (never inside an escape)
        self.line_end = line_end
        self.inside = False  # whether `scanned` lies inside a string
        self.close = -1  # when inside: where that string closes (the line's end if not)


def string_end(view: TextView, pos: int) -> int:
    """Where the double-quoted string holding `pos` closes, when `pos` lies inside one
    that closes on its line (-1 otherwise): after an odd number of unescaped `"` from
    the line's start.

    Remembered per text: the keys along one line are asked about in order, so the line
    is read once, however many keys it holds."""
    text = view.text
    scan = view.cache.get("strings")
    if not (
        isinstance(scan, _StringScan)
        and scan.scanned <= pos <= scan.line_end
        and text.find("\n", scan.scanned, pos) < 0
    ):
        start = text.rfind("\n", 0, pos) + 1
        end = text.find("\n", pos)
        scan = _StringScan(start, len(text) if end < 0 else end)
        view.cache["strings"] = scan
    while True:
        if scan.inside:
            if scan.close < 0:
                scan.close = _next_quote(text, scan.scanned, scan.line_end)
            if pos <= scan.close:
                scan.scanned = max(scan.scanned, pos)  # still inside: nothing to recount
                return scan.close if scan.close < scan.line_end else -1
            scan.scanned, scan.inside, scan.close = scan.close + 1, False, -1
            continue
        found = _next_quote(text, scan.scanned, pos)
        if found >= pos:
            # No string opens before `pos`; resume where no escape is cut in two.
            scan.scanned = pos - 1 if pos > scan.scanned and text[pos - 1] == "\\" else pos
            if scan.scanned < pos and _escaped_before(text, scan.scanned):
                scan.scanned = pos
            return -1
        scan.scanned, scan.inside = found + 1, True


def _next_quote(text: str, start: int, stop: int) -> int:
    """The first unescaped `"` in `text[start:stop]`, or `stop`."""
    for match in _QUOTE_OR_ESCAPE.finditer(text, start, stop):
        if match.group() == '"':
            return match.start()
    return stop


def _escaped_before(text: str, pos: int) -> bool:
    """Whether the character at `pos` is itself escaped (an odd run of backslashes
    ends right before it)."""
    run = pos
    while run > 0 and text[run - 1] == "\\":
        run -= 1
    return (pos - run) % 2 == 1


def value_end(view: TextView, start: int, form: Form, *, in_string: bool = True) -> int:
    """End (exclusive) of an unquoted value of `form` starting at `start`.

    Inside a double-quoted string the quote that closes it ends the value (`\\"` is
    then part of it); outside one an escaped quote `\\"` does: the value sits in a JSON
    document escaped into a string. (`in_string=False` skips that question, for forms
    whose key was quoted in the text already.)"""
    if form is Form.WORD:
        end = view.next_at(_WORD_STOP, start)
    elif form is Form.URL_PARAM:
        end = view.next_at(_URL_STOP, start)
    elif form is Form.FIELD:
        end = view.next_at(_FIELD_STOP, start)
    elif form is Form.XML:
        return max(start, view.space_run_start(view.next_at(_TAG, start)))
    else:
        end = min(view.line_end(start), view.next_at(_JSON_BLANK, start))
        if form is Form.SCALAR:
            end = min(end, view.next_at(_BLANK_HASH, start))
        elif form is Form.CELL:
            end = min(end, view.next_at(_CELL_STOP, start))
        elif form is Form.COLUMN:
            end = min(end, view.next_at(_COLUMN_STOP, start))
        end = max(start, view.blank_run_start(end))
    close = string_end(view, start) if in_string else -1
    if close < 0:
        close = view.next_at(_ESCAPED_QUOTE, start)
    return min(end, close)


# -- whether a value is a credential ---------------------------------------------------

# Words that make a value read as a sentence rather than a secret: "must be at least 12
# characters", "signature is invalid". Function words and the verbs of status messages;
# a value whose first or second word is one of them (and whose first two words are
# plain words) is prose. Pronouns, nouns and adjectives are left out: they begin
# passphrases ("correct horse battery staple" stays a secret).
PROSE_WORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "am",
        "has",
        "have",
        "had",
        "does",
        "do",
        "did",
        "not",
        "no",
        "nor",
        "must",
        "should",
        "shall",
        "will",
        "would",
        "can",
        "could",
        "may",
        "might",
        "cannot",
        "can't",
        "won't",
        "isn't",
        "aren't",
        "wasn't",
        "doesn't",
        "don't",
        "didn't",
        "of",
        "for",
        "to",
        "in",
        "on",
        "at",
        "by",
        "with",
        "from",
        "into",
        "onto",
        "about",
        "over",
        "under",
        "and",
        "or",
        "but",
        "if",
        "when",
        "whenever",
        "then",
        "than",
        "that",
        "this",
        "these",
        "those",
        "it",
        "its",
        "as",
        "so",
        "too",
        "very",
        "also",
        "only",
        "just",
        "please",
        "see",
        "use",
        "used",
        "using",
        "via",
        "per",
        "after",
        "before",
        "during",
        "while",
        "because",
        "since",
        "until",
        "unless",
        "without",
        "within",
        "whether",
        "which",
        "who",
        "whom",
        "whose",
        "where",
        "how",
        "what",
        "why",
        "expires",
        "expire",
        "expired",
        "failed",
        "fails",
        "fail",
        "required",
        "requires",
        "require",
        "changed",
        "change",
        "changes",
        "reset",
        "resets",
        "rotated",
        "rotate",
        "rotates",
        "updated",
        "update",
        "updates",
        "missing",
        "invalid",
        "needs",
        "need",
        "contains",
        "contain",
        "includes",
        "include",
        "length",
        "policy",
        "rules",
        "rule",
        "characters",
        "chars",
        "field",
        "value",
        "successfully",
        "succeeded",
        "accepted",
        "rejected",
        "denied",
        "revoked",
        "provided",
        "set",
        "stored",
        "saved",
        "found",
        "read",
        "sent",
    ]
)
# A single word that says what state a credential is in, not what it is.
STATUS_WORDS = frozenset(
    [
        "expired",
        "invalid",
        "missing",
        "revoked",
        "rotated",
        "changed",
        "updated",
        "reset",
        "required",
        "valid",
        "ok",
        "okay",
        "present",
        "absent",
        "configured",
        "enabled",
        "disabled",
        "incorrect",
        "wrong",
        "mismatch",
        "mismatched",
        "accepted",
        "rejected",
        "denied",
        "unknown",
        "provided",
        "generated",
        "created",
        "deleted",
        "removed",
        "refreshed",
        "pending",
        "active",
        "inactive",
        "unchanged",
        "opaque",
    ]
)
_TWO_WORDS = re.compile(
    r"([A-Za-z']{1,24})[.,;:!?]?(?:[ \t]+([A-Za-z']{1,24})[.,;:!?]?)?(?=[\s)]|$)"
)
_IDENTIFIER_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
# Values that name where a credential is, not the credential: a path, a secret
# manager's or Kubernetes' reference, a Secret's type.
_REFERENCE = re.compile(
    r"(?:/|~/|\./|\.\./|[A-Za-z]:\\|file:|env:|vault:|arn:aws:|kubernetes\.io/|"
    r"bootstrap\.kubernetes\.io/|projects/[^/\s]+/secrets/|[a-z][a-z0-9+.-]*://)"
)


def reads_as_prose(text: str, start: int, end: int) -> bool:
    """Whether the value at `start` is a sentence or a status word, not a secret. Reads
    the first two words at most (they may lie past `end`: a value that stops at a blank
    is judged with the word after it)."""
    match = _TWO_WORDS.match(text, start, min(len(text), start + 60))
    if match is None:
        return False
    first, second = match.group(1).lower(), match.group(2)
    if second is None:
        return first in STATUS_WORDS
    second = second.lower()
    return first in PROSE_WORDS or second in PROSE_WORDS or first in STATUS_WORDS


def is_reference(text: str, start: int, end: int) -> bool:
    """A path or a reference to where the credential is kept (`/run/secrets/db`,
    `env:DB_PASS`, `arn:aws:secretsmanager:...`)."""
    return _REFERENCE.match(text, start, end) is not None


def shaped_like_secret(text: str, start: int, end: int) -> bool:
    """A value that would not be a word of prose: it holds a digit, a mark or capitals
    after its first letter. For keys written without a clear separator (`key:value`,
    `key value` in the middle of a line)."""
    if end - start < 4:
        return False
    value = text[start : min(end, start + 64)]
    return not (value.isalpha() and (value.islower() or value[1:].islower()))


def is_variable(text: str, key: str, start: int, end: int, owns_name: object) -> bool:
    """`password=password`, `password=self.db_password`: code passing a variable."""
    bare = key.lstrip("-")
    while end > start and text[end - 1] in "),;]}":
        end -= 1  # `connect(dsn, password=password)`
    # (Lower-casing keeps the length of anything that can equal an ASCII key.)
    if end - start == len(bare) and text[start:end].lower() == bare.lower():
        return True
    path = _IDENTIFIER_PATH.match(text, start, end)
    if path is None or path.end() != end:
        return False
    dot = text.rfind(".", start, end)
    if dot < 0:
        return False
    assert callable(owns_name)
    return bool(owns_name(text[dot + 1 : end]))


def holds_a_value(view: TextView, start: int, end: int) -> bool:
    """Something stands there that is not already masked nor a placeholder."""
    return (
        end > start
        and not view.text.startswith(MASK_PREFIX, start)
        and not is_placeholder_span(view, start, end)
    )
