"""Finding credentials written as a key and a value: `password: x`, `DB_PASSWORD=x`,
`"client_secret": "x"`, `--token x`, `?access_token=x`, a Kubernetes env pair
`name: DB_PASSWORD` / `value: x`. Shared by the key-value and cloud-key families, and
by the masker for keys of structured data.

Driven by the positions of a few keywords rather than by one big case-insensitive
regex (which Python runs slowly, trying every position): the prefilter usually knows
where each keyword is already, and the anchored regexes then run only there. The key
around a keyword decides whether it names a credential (`client_secret` does,
`secretName` does not).
"""

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import cast

from worker.masking.detectors.base import (
    KEY_TAIL,
    LOOSE_QUOTE,
    QUOTE,
    SPACE,
    Anchor,
    Apply,
    Confirm,
    Edit,
    Split,
)
from worker.masking.text import (
    KEY_CHARS,
    MASK_PREFIX,
    TextView,
    is_placeholder_span,
)

# `:` after an unquoted key only counts when the key starts its line (YAML, headers,
# `key: value` logs) or follows an opening brace or separator, so prose such as
# "failed to validate token: signature is invalid" is left alone.
_LINE_PREFIX_OK = frozenset(" \t-*>#|+")
_AFTER_OK = frozenset("{,;([")
# What may stand before a header key in a curl argument (`-H 'X-API-Key: v'`) or before
# an assigned variable (`export DB_PASSWORD=x`), each after the line start or a space.
_CURL_HEADER_FLAGS = ("-H", "--header")
_EXPORT_WORDS = ("export", "set", "setx", "ENV")

_SEPARATOR = re.compile(
    r"(?P<kq>\\{0,3}[\"'])?[ \t]*(?P<op>:=|=>|==|[:=])[ \t]*(?P<vq>\\{0,3}[\"'])?"
)
_ARG_GAP = re.compile(r"[ \t]+")
_NAME_BEFORE = re.compile(r"\bname\\{0,3}[\"']?[ \t]*[:=][ \t]*\\{0,3}[\"']?$", re.IGNORECASE)
_VALUE_AFTER = re.compile(
    r"(?P<kq>\\{0,3}[\"'])?[ \t]*,?(?:\s|\\n|\\r){0,8}(?:-[ \t]+)?\\{0,3}[\"']?value\\{0,3}[\"']?"
    r"[ \t]*[:=][ \t]*(?P<vq>\\{0,3}[\"'])?",
    re.IGNORECASE,
)
_DQ_VALUE = re.compile(r'(?:[^"\\\n]|\\[^\n])*')
# Where values stop, one character (or escape) each: `TextView.next_at` patterns.
_UNQUOTED_STOP = re.compile(r"[\s&\"'`;,)\]}<>]|\\[nrt\"]")
_BLANK_HASH = re.compile(r"[ \t]#")  # a YAML comment starts at the blanks before `#`

Classifier = Callable[[str, str], bool]


def normalise_key(key: str) -> str:
    return key.lower().replace("_", "").replace("-", "").replace(".", "")


@dataclass(frozen=True, slots=True)
class KeyValueRule:
    """Which keys a detector owns and what their values become."""

    keywords: tuple[str, ...]  # lower-case; every owned key contains one
    owns: Classifier  # (raw key, normalised key) -> bool
    replacement: str


# Each helper below reads only around one key: between the key and the next place its
# value can stop, or back to where its line starts. What reaches further (a line's end,
# the blanks before it) is asked of the view, which remembers it, so a line holding
# thousands of keys costs its length, not its length per key.


def _quoted_end(view: TextView, start: int, quote: str) -> int:
    """End (exclusive) of a quoted value starting at `start`; the line's end if unclosed.

    `quote` is the opening quote as written: `"`, `'`, or an escaped `\\"` inside JSON.
    """
    text = view.text
    stop = view.line_end(start)
    if quote == '"':
        # Stops at the first unescaped `"`: the opening quote of the next key's value
        # at the latest, so the values of several keys are never read twice.
        match = _DQ_VALUE.match(text, start)
        end = match.end() if match else start
        return end if text.startswith('"', end) else stop
    end = text.find(quote, start, stop)
    return end if end >= 0 else stop


def _at_line_start(text: str, pos: int) -> bool:
    """Whether `pos` starts a line (a JSON-escaped `\\n` breaks lines too)."""
    return pos == 0 or text[pos - 1] == "\n" or (pos >= 2 and text.startswith("\\n", pos - 2))


def _space_before(text: str, pos: int) -> int:
    """Where the whitespace ending at `pos` starts, within its line."""
    while pos > 0 and text[pos - 1].isspace() and text[pos - 1] != "\n":
        pos -= 1
    return pos


def _word_before(text: str, pos: int, words: tuple[str, ...]) -> bool:
    """Whether one of `words` ends at `pos`, starting its line or after whitespace."""
    for word in words:
        start = pos - len(word)
        if (
            start >= 0
            and text.startswith(word, start)
            and (_at_line_start(text, start) or text[start - 1].isspace())
        ):
            return True
    return False


def _key_position_ok(text: str, key_start: int) -> bool:
    """Whether an unquoted key followed by `:` is a mapping key, judged by what stands
    before it on its line, read backwards from the key (never the whole line)."""
    i = key_start
    while i > 0 and text[i - 1] in _LINE_PREFIX_OK:
        i -= 1
    if _at_line_start(text, i):
        return True  # only list markers, quotes of Markdown, indentation before it
    gap = _space_before(text, key_start)
    if gap > 0 and text[gap - 1] in _AFTER_OK:
        return True
    if gap < key_start and _word_before(text, gap, _EXPORT_WORDS):
        return True
    # A curl header: `-H 'X-API-Key: v'`, the quote maybe escaped up to three times.
    i = key_start - 1 if key_start > 0 and text[key_start - 1] in "'\"" else key_start
    floor = max(0, i - 3)
    while i > floor and text[i - 1] == "\\":
        i -= 1
    gap = _space_before(text, i)
    return gap < i and _word_before(text, gap, _CURL_HEADER_FLAGS)


def _value_span(view: TextView, start: int, quote: str | None, yaml_like: bool) -> tuple[int, int]:
    if quote:
        return start, _quoted_end(view, start, quote)
    if yaml_like:
        # `password: two words` in YAML is one value: the rest of the line less a comment.
        end = view.line_end(start)
        comment = view.next_at(_BLANK_HASH, start)
        if comment < end:
            end = comment
        return start, max(start, view.blank_run_start(end))
    return start, view.next_at(_UNQUOTED_STOP, start)


def keys_around(view: TextView, keyword: str) -> list[tuple[int, int, str, str]]:
    """(start, end, key, normalised key) of each key holding `keyword`, computed once per
    text and shared by the detectors that look for the same keyword."""
    cache = view.cache
    cached = cache.get(keyword)
    if cached is not None:
        return cast("list[tuple[int, int, str, str]]", cached)
    text = view.text
    n = len(text)
    found: list[tuple[int, int, str, str]] = []
    skip_to = 0
    for pos in view.find_all(keyword):
        if pos < skip_to:
            continue  # inside a key already looked at
        key_start = pos
        while key_start > 0 and text[key_start - 1] in KEY_CHARS:
            key_start -= 1
        key_end = pos + len(keyword)
        while key_end < n and text[key_end] in KEY_CHARS:
            key_end += 1
        skip_to = key_end
        key = text[key_start:key_end].rstrip(".-")
        if key:
            found.append((key_start, key_start + len(key), key, normalise_key(key)))
    cache[keyword] = found
    return found


def find_values(view: TextView, rule: KeyValueRule) -> list[tuple[int, int, str]]:
    """(start, end, replacement) of every credential value `rule` owns in the text."""
    text = view.text
    edits: list[tuple[int, int, str]] = []
    seen_keys: set[int] = set()
    for keyword in rule.keywords:
        for key_start, key_end, key, norm in keys_around(view, keyword):
            if key_start in seen_keys or not rule.owns(key, norm):
                continue
            seen_keys.add(key_start)
            span = _value_after_key(view, key_start, key_end, key)
            if span is None:
                span = _env_pair_value(view, key_start, key_end)
            if span is None:
                continue
            start, end = span
            # The value is judged by its edges, never copied: it may hold the next keys.
            if end <= start or text.startswith(MASK_PREFIX, start):
                continue
            if is_placeholder_span(view, start, end):
                continue
            if _is_variable_named_like(text, key, start, end, rule):
                continue
            edits.append((start, end, rule.replacement))
    return edits


_IDENTIFIER_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


def _is_variable_named_like(text: str, key: str, start: int, end: int, rule: KeyValueRule) -> bool:
    """`password=password`, `password=self.db_password`: code passing a variable."""
    bare = key.lstrip("-")
    # (Lower-casing keeps the length of anything that can equal an ASCII key.)
    if end - start == len(bare) and text[start:end].lower() == bare.lower():
        return True
    path = _IDENTIFIER_PATH.match(text, start, end)
    if path is None or path.end() != end:
        return False
    dot = text.rfind(".", start, end)
    if dot < 0:
        return False
    name = text[dot + 1 : end]
    return rule.owns(name, normalise_key(name))


def _value_after_key(
    view: TextView, key_start: int, key_end: int, key: str
) -> tuple[int, int] | None:
    text = view.text
    sep = _SEPARATOR.match(text, key_end)
    if sep is not None:
        key_quote = sep.group("kq")
        op = sep.group("op")
        if key_quote:
            if key_start < len(key_quote) or not text.startswith(
                key_quote, key_start - len(key_quote)
            ):
                return None
        elif op == ":" and not _key_position_ok(text, key_start):
            return None
        if op == "==":
            return None  # a comparison (`token == ""`), not an assignment
        yaml_like = op == ":" and not key_quote and not sep.group("vq")
        if yaml_like and not text.startswith((" ", "\t"), sep.start("op") + 1):
            # `key:value` without a space is a YAML scalar or a URL, not a mapping.
            yaml_like = False
            if not key.startswith("-"):
                return None
        outer = text[key_start - 1] if key_start > 0 and not key_quote else ""
        if outer in ("'", '"') and not sep.group("vq"):
            # A header inside a quoted argument (`-H 'X-API-Key: v'`) ends with the quote.
            start = sep.end()
            end = text.find(outer, start, view.line_end(start))
            if end >= 0:
                return start, end
        return _value_span(view, sep.end(), sep.group("vq"), yaml_like)
    if key.startswith("--"):
        gap = _ARG_GAP.match(text, key_end)
        if gap is None or text.startswith("-", gap.end()):
            return None
        quote = text[gap.end()] if gap.end() < len(text) and text[gap.end()] in "\"'" else None
        start = gap.end() + (1 if quote else 0)
        return _value_span(view, start, quote, yaml_like=False)
    return None


def _env_pair_value(view: TextView, key_start: int, key_end: int) -> tuple[int, int] | None:
    """The value of `- name: DB_PASSWORD` / `value: x` (YAML or JSON env entries)."""
    text = view.text
    if not _NAME_BEFORE.search(text, max(0, key_start - 24), key_start):
        return None
    after = _VALUE_AFTER.match(text, key_end)
    if after is None:
        return None
    quote = after.group("vq")
    yaml_like = not quote
    return _value_span(view, after.end(), quote, yaml_like)


# -- which keys each detector owns --------------------------------------------------

_PAGINATION = ("nexttoken", "pagetoken", "continuetoken", "continuationtoken", "synctoken")


def owns_password(key: str, norm: str) -> bool:
    if norm.endswith(("password", "passwd", "passphrase")):
        return True
    if norm.endswith("pwd"):
        return norm not in ("pwd", "oldpwd")  # the shell's working directory
    lower = key.lower()
    return lower.lstrip("-") == "pass" or lower.endswith(("_pass", "-pass", ".pass"))


def owns_aws_secret(key: str, norm: str) -> bool:
    return norm.endswith(("secretaccesskey", "awssecretkey"))


def owns_secret(key: str, norm: str) -> bool:
    return norm.endswith(("secret", "secretkey")) and not owns_aws_secret(key, norm)


def owns_token(key: str, norm: str) -> bool:
    return norm.endswith("token") and not norm.endswith(_PAGINATION)


def owns_api_key(key: str, norm: str) -> bool:
    # `api_token` ends with "token": the token detector masks it.
    return norm.endswith("apikey")


def owns_private_key(key: str, norm: str) -> bool:
    return norm.endswith("privatekey")


def owns_storage_key(key: str, norm: str) -> bool:
    # Azure Storage and Service Bus connection strings (`AccountKey=`,
    # `SharedAccessKey=`); `SharedAccessKeyName` names the key and stays.
    return norm.endswith(("accountkey", "sharedaccesskey"))


def owns_cookie(key: str, norm: str) -> bool:
    return norm.endswith("cookie")


PASSWORD = KeyValueRule(("pass", "pwd"), owns_password, "[MASKED_PASSWORD]")
SECRET = KeyValueRule(("secret",), owns_secret, "[MASKED_SECRET]")
AWS_SECRET = KeyValueRule(("secret",), owns_aws_secret, "[MASKED_AWS_SECRET_ACCESS_KEY]")
TOKEN = KeyValueRule(("token",), owns_token, "[MASKED_TOKEN]")
API_KEY = KeyValueRule(("api_key", "apikey", "api-key"), owns_api_key, "[MASKED_API_KEY]")
STORAGE_KEY = KeyValueRule(
    ("accountkey", "account_key", "account-key", "sharedaccesskey"),
    owns_storage_key,
    "[MASKED_ACCOUNT_KEY]",
)


# -- anchors and detectors of key-value rules ----------------------------------------

_KEY_RUN = re.compile(r"[A-Za-z0-9_.\-]+")


def _key_run_end(text: str, start: int) -> int:
    """Where the run of key characters starting at `start` ends."""
    if start >= len(text) or text[start] not in KEY_CHARS:
        return start  # the usual case (a keyword in prose), without a regex call
    match = _KEY_RUN.match(text, start)
    return match.end() if match else start


def _flag_confirm(length: int) -> Confirm:
    """`--[key]*KEYWORD[key]*[ \t]` at an occurrence of a keyword of `length` chars.

    A match holds an occurrence preceded, within the run of key characters that ends
    there, by `--`, and followed by a run of key characters and a blank. Neighbouring
    occurrences share their runs, so no character is walked twice: linear in the text.
    """

    def confirm(text: str, starts: list[int]) -> bool:
        size = len(text)
        # A `--` before the previous checked occurrence was not there: look after it.
        floor = 0
        after_from = after_to = -1  # the key run from `after_from` on ends at `after_to`
        for start in starts:
            end = start + length
            if not after_from <= end <= after_to:
                after_to = _key_run_end(text, end)
            after = after_to
            after_from = end
            if after >= size or text[after] not in " \t":
                continue
            run = start
            while run > floor and text[run - 1] in KEY_CHARS:
                run -= 1
            if text.find("--", run, start) >= 0:
                return True
            floor = start
        return False

    return confirm


@cache  # one Anchor per keyword: detectors sharing it share its prefilter work
def key_anchor(keyword: str) -> Anchor:
    """Where `find_values` can match: a key holding `keyword` followed by a
    separator, a space (`--token x`), or a Kubernetes env pair's `value` key."""
    k = re.escape(keyword)
    separator = rf"{k}{KEY_TAIL}{QUOTE}[ \t]*[:=]"
    flag = rf"--{KEY_TAIL}{k}{KEY_TAIL}[ \t]"
    env_value = (
        rf"{k}{KEY_TAIL}{QUOTE}[ \t]*,?(?:[{SPACE}]|\\[nr]){{0,8}}(?:-[ \t]+)?{LOOSE_QUOTE}value"
    )
    return Anchor(
        keyword,
        pattern=f"{separator}|{flag}|{env_value}",
        # A flag holds the keyword right after a key character (its own dash at least)
        # and before key characters and a blank: "missing secrets" is no candidate.
        split=Split(
            f"{separator}|{env_value}",
            _flag_confirm(len(keyword)),
            candidate=rf"[A-Za-z0-9_.\-]{k}{KEY_TAIL}[ \t]",
        ),
    )


def keyvalue_detector(*rules: KeyValueRule) -> Apply:
    def apply(view: TextView) -> list[Edit]:
        edits: list[tuple[int, int, str]] = []
        for rule in rules:
            edits.extend(find_values(view, rule))
        return edits

    return apply
