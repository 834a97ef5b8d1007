"""Credentials written as a key and a value: `password: x`, `DB_PASSWORD=x`,
`"client_secret": "x"`, `--token x`, `?access_token=x`, a Kubernetes env pair
`name: DB_PASSWORD` / `value: x`.

Driven by the positions of a few keywords rather than by one big case-insensitive
regex (which Python runs slowly, trying every position): the prefilter usually knows
where each keyword is already, and the anchored regexes then run only there. The key around a keyword decides whether it names
a credential (`client_secret` does, `secretName` does not).
"""

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from worker.masking.text import (
    KEY_CHARS,
    MASK_PREFIX,
    TextView,
    is_placeholder,
    line_end,
    line_start,
)

# `:` after an unquoted key only counts when the key starts its line (YAML, headers,
# `key: value` logs) or follows an opening brace or separator, so prose such as
# "failed to validate token: signature is invalid" is left alone.
_LINE_PREFIX_OK = frozenset(" \t-*>#|+")
_AFTER_OK = ("{", ",", ";", "(", "[")
_CURL_HEADER = re.compile(r"(?:^|\s)(?:-H|--header)\s+\\{0,3}['\"]?$")
_EXPORT = re.compile(r"(?:^|\s)(?:export|set|setx|ENV)\s+$")

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
_UNQUOTED_STOP = re.compile(r"[\s&\"'`;,)\]}<>]|\\[nrt\"]")
_YAML_COMMENT = re.compile(r"[ \t]+#")

Classifier = Callable[[str, str], bool]


def normalise_key(key: str) -> str:
    return key.lower().replace("_", "").replace("-", "").replace(".", "")


@dataclass(frozen=True, slots=True)
class KeyValueRule:
    """Which keys a detector owns and what their values become."""

    keywords: tuple[str, ...]  # lower-case; every owned key contains one
    owns: Classifier  # (raw key, normalised key) -> bool
    replacement: str


def _quoted_end(text: str, start: int, quote: str) -> int:
    """End (exclusive) of a quoted value starting at `start`; the line's end if unclosed.

    `quote` is the opening quote as written: `"`, `'`, or an escaped `\\"` inside JSON.
    """
    if quote == '"':
        match = _DQ_VALUE.match(text, start)
        end = match.end() if match else start
        return end if text.startswith('"', end) else line_end(text, start)
    end = text.find(quote, start)
    stop = line_end(text, start)
    return end if 0 <= end <= stop else stop


def _unquoted_end(text: str, start: int) -> int:
    match = _UNQUOTED_STOP.search(text, start)
    return match.start() if match else len(text)


def _key_position_ok(text: str, key_start: int) -> bool:
    prefix = text[line_start(text, key_start) : key_start]
    if all(c in _LINE_PREFIX_OK for c in prefix):
        return True
    stripped = prefix.rstrip()
    if stripped.endswith(_AFTER_OK):
        return True
    return bool(_CURL_HEADER.search(prefix) or _EXPORT.search(prefix))


def _value_span(text: str, start: int, quote: str | None, yaml_like: bool) -> tuple[int, int]:
    if quote:
        return start, _quoted_end(text, start, quote)
    if yaml_like:
        # `password: two words` in YAML is one value: the rest of the line less a comment.
        end = line_end(text, start)
        comment = _YAML_COMMENT.search(text, start, end)
        if comment:
            end = comment.start()
        while end > start and text[end - 1] in " \t":
            end -= 1
        return start, end
    return start, _unquoted_end(text, start)


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
            span = _value_after_key(text, key_start, key_end, key)
            if span is None:
                span = _env_pair_value(text, key_start, key_end)
            if span is None:
                continue
            start, end = span
            value = text[start:end]
            if end <= start or is_placeholder(value) or value.startswith(MASK_PREFIX):
                continue
            if _is_variable_named_like(key, value, rule):
                continue
            edits.append((start, end, rule.replacement))
    return edits


_IDENTIFIER_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


def _is_variable_named_like(key: str, value: str, rule: KeyValueRule) -> bool:
    """`password=password`, `password=self.db_password`: code passing a variable."""
    if value.lower() == key.lstrip("-").lower():
        return True
    if "." not in value or not _IDENTIFIER_PATH.fullmatch(value):
        return False
    name = value.rsplit(".", 1)[-1]
    return rule.owns(name, normalise_key(name))


def _value_after_key(text: str, key_start: int, key_end: int, key: str) -> tuple[int, int] | None:
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
            end = text.find(outer, start, line_end(text, start))
            if end >= 0:
                return start, end
        return _value_span(text, sep.end(), sep.group("vq"), yaml_like)
    if key.startswith("--"):
        gap = _ARG_GAP.match(text, key_end)
        if gap is None or text.startswith("-", gap.end()):
            return None
        quote = text[gap.end()] if gap.end() < len(text) and text[gap.end()] in "\"'" else None
        start = gap.end() + (1 if quote else 0)
        return _value_span(text, start, quote, yaml_like=False)
    return None


def _env_pair_value(text: str, key_start: int, key_end: int) -> tuple[int, int] | None:
    """The value of `- name: DB_PASSWORD` / `value: x` (YAML or JSON env entries)."""
    if not _NAME_BEFORE.search(text, max(0, key_start - 24), key_start):
        return None
    after = _VALUE_AFTER.match(text, key_end)
    if after is None:
        return None
    quote = after.group("vq")
    yaml_like = not quote
    return _value_span(text, after.end(), quote, yaml_like)


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


PASSWORD = KeyValueRule(("pass", "pwd"), owns_password, "[MASKED_PASSWORD]")
SECRET = KeyValueRule(("secret",), owns_secret, "[MASKED_SECRET]")
AWS_SECRET = KeyValueRule(("secret",), owns_aws_secret, "[MASKED_AWS_SECRET_ACCESS_KEY]")
TOKEN = KeyValueRule(("token",), owns_token, "[MASKED_TOKEN]")
API_KEY = KeyValueRule(("api_key", "apikey", "api-key"), owns_api_key, "[MASKED_API_KEY]")
