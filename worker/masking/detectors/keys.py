"""Finding credentials written as a key and a value, wherever the key stands on its line.

`password: x`, `DB_PASSWORD=x`, `"client_secret": "x"`, `--token x`, `?access_token=x`,
`spring.datasource.password x`, `| password | x |`, `password<TAB>x`, `<password>x
</password>`, a key and its value on the next line or in a YAML block scalar, a
Kubernetes env entry (`name: DB_PASSWORD` with its `value:` after or before it). The
key may follow a log prefix, stand in a sentence or in a table cell.

Driven by the positions of a few keywords rather than by one big case-insensitive
regex (which Python runs slowly, trying every position): the prefilter usually knows
where each keyword is already, and the anchored regexes then run only there. Which
keys name a credential is `vocabulary`; where a value ends and whether it is one,
`values`.
"""

import itertools
import re
from functools import cache
from typing import cast

from worker.masking.detectors.base import (
    QUOTE,
    SPACE,
    Anchor,
    Apply,
    Confirm,
    Edit,
    Split,
)
from worker.masking.detectors.values import (
    Form,
    holds_a_value,
    is_reference,
    is_variable,
    quoted_end,
    reads_as_prose,
    shaped_like_secret,
    value_end,
)
from worker.masking.detectors.vocabulary import (
    KeyValueRule,
    is_counter,
    key_words,
    normalise_key,
    path_is_reference,
)
from worker.masking.prefixes import prefix_end
from worker.masking.text import TextView, is_key_char

# How much a value found after a key must prove: nothing more than not being a
# placeholder (after `=`, a quoted key, a flag); not reading as prose either (after
# `:` or a blank, where sentences go on: "token: signature is invalid"); and looking
# like a secret besides, where nothing but the key's shape says it is a mapping
# (`aws_secret_access_key wJalr...` in the middle of a line).
STRONG, LOOSE, SHAPED = 0, 1, 2
Found = tuple[int, int, int]  # (start, end, strength)

# An operator after a key (a quote closing a quoted key before it), and a quote opening
# the value after it. `：` and `＝` are the full-width forms.
_SEPARATOR = re.compile(
    r"(?P<kq>\\{0,3}[\"'])?[ \t]*(?P<op>:=|=>|==|[:=]|：|＝)[ \t]*(?P<vq>\\{0,3}[\"'])?"
)
_BLANKS = re.compile(r"[ \t]+")
# What may stand between a line's start (or log prefix) and a key at its head:
# indentation, list markers, Markdown quotes and tables, comment marks.
_HEAD = frozenset(" \t-*>#|+")
_EXPORT = re.compile(r"(?:export|set|setx|ENV|declare -x|local)[ \t]+")
_NAME_BEFORE = re.compile(
    r"\b(?:name|key)\\{0,3}[\"']?[ \t]*[:=][ \t]*\\{0,3}[\"']?$", re.IGNORECASE
)
_VALUE_AFTER = re.compile(
    r"(?P<kq>\\{0,3}[\"'])?[ \t]*,?(?:\s|\\n|\\r){0,8}(?:-[ \t]+)?\\{0,3}[\"']?value\\{0,3}[\"']?"
    r"[ \t]*[:=][ \t]*(?P<vq>\\{0,3}[\"'])?",
    re.IGNORECASE,
)
_VALUE_BEFORE = re.compile(
    r"\bvalue\\{0,3}[\"']?[ \t]*[:=][ \t]*(?P<vq>\\{0,3}[\"'])?", re.IGNORECASE
)
_LOOK_BACK = 512  # how far back a name's value may stand (a bounded read per key)
_TAG = re.compile(r"<")
_TAG_NAME = re.compile(r"[\w.:-]+")
_TABLE_RULE = re.compile(r"[ \t]*\|?[ \t]*:?-{3,}")
_HADOOP_VALUE = re.compile(r"(?:\s|\\[nrt]){0,40}<value>")
_BLOCK_INDICATOR = re.compile(r"[|>][-+]?[0-9]?[-+]?[ \t]*(?:#[^\n]*)?(?=\r?\n|\\n|$)")
_LINE_BREAK = re.compile(r"\r?\n|\\r\\n|\\n")
_MAPPING_KEY = re.compile(r"[^\s:#][^:\n]*:(?:[ \t]|$|\r?\n)")
# Directives of configuration files that take their value after a blank.
_DIRECTIVES = frozenset({"requirepass", "masterauth", "masteruser", "identified"})
_SHORT = frozenset({"pass", "pw"})


def keys_around(view: TextView, keyword: str) -> list[tuple[int, int, str, str]]:
    """(start, end, key, normalised key) of each key holding `keyword`, computed once per
    text and shared by the detectors that look for the same keyword."""
    cache_ = view.cache
    cached = cache_.get(keyword)
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
        while key_start > 0 and is_key_char(text[key_start - 1]):
            key_start -= 1
        key_end = pos + len(keyword)
        while key_end < n and is_key_char(text[key_end]):
            key_end += 1
        skip_to = key_end
        key = text[key_start:key_end].rstrip(".-")
        if key:
            found.append((key_start, key_start + len(key), key, normalise_key(key)))
    cache_[keyword] = found
    return found


def find_values(view: TextView, rule: KeyValueRule) -> list[Edit]:
    """(start, end, replacement) of every credential value `rule` owns in the text."""
    text = view.text
    edits: list[Edit] = []
    seen: set[tuple[int, int]] = set()
    for keyword in rule.keywords:
        covered = 0  # a block scalar masked already holds no key of its own
        for key_start, key_end, key, norm in keys_around(view, keyword):
            if key_start < covered or (key_start, key_end) in seen:
                continue
            if key_start > 0 and text[key_start - 1] in "/\\":
                continue  # a path's segment (`kubernetes.io/service-account-token`)
            seen.add((key_start, key_end))
            if not rule.owns(key, norm):
                continue
            found = value_of_key(view, key_start, key_end, key)
            if found is None:
                continue
            start, end, strength = found
            if not holds_a_value(view, start, end):
                continue
            if is_variable(
                text, key, start, end, lambda name: rule.owns(name, normalise_key(name))
            ):
                continue
            if end - start <= 24 and is_counter(key, text[start:end]):
                continue
            if (strength or path_is_reference(rule, norm)) and is_reference(text, start, end):
                continue
            if strength >= LOOSE and reads_as_prose(text, start, end):
                continue
            if strength == SHAPED and not shaped_like_secret(text, start, end):
                continue
            edits.append((start, end, rule.replacement))
            covered = max(covered, end)
    return edits


def value_of_key(view: TextView, key_start: int, key_end: int, key: str) -> Found | None:
    """Where the value written after (or for) the key at `key_start` is, and how much it
    must prove to be masked; None when nothing there is a value."""
    text = view.text
    sep = _SEPARATOR.match(text, key_end)
    if sep is not None:
        return _after_operator(view, key_start, key, sep)
    before = text[key_start - 1] if key_start > 0 else ""
    if before == "<" and text.startswith(">", key_end):
        # <password>x</password>
        return _xml_text(view, key_end + 1, f"</{text[key_start:key_end]}>")
    if text.endswith("<name>", 0, key_start) and text.startswith("</name>", key_end):
        value = _HADOOP_VALUE.match(text, key_end + 7)  # <name>x.password</name><value>
        return _xml_text(view, value.end(), "</value>") if value else None
    name = _NAME_BEFORE.search(text, max(0, key_start - 24), key_start)
    if name is not None:
        return _pair_value(view, name.start(), key_end)
    return _after_blank(view, key_start, key_end, key)


def _xml_text(view: TextView, start: int, closing: str) -> Found | None:
    """An element's text, when the element closes right after it."""
    text = view.text
    while start < len(text) and text[start].isspace():
        start += 1
    end = value_end(view, start, Form.XML)
    return (start, end, STRONG) if text.startswith(closing, view.next_at(_TAG, start)) else None


def _after_operator(view: TextView, key_start: int, key: str, sep: re.Match[str]) -> Found | None:
    text = view.text
    key_quote, op, value_quote = sep.group("kq"), sep.group("op"), sep.group("vq")
    if key_quote and not text.endswith(key_quote, 0, key_start):
        return None  # a closing quote with no opening one: not a quoted key
    if op == "==":
        return None  # a comparison (`token == ""`), not an assignment
    start = sep.end()
    if value_quote:
        return start, quoted_end(view, start, value_quote), STRONG
    outer = text[key_start - 1] if key_start > 0 and not key_quote else ""
    if outer in ("'", '"'):
        # A header inside a quoted argument (`-H 'X-API-Key: v'`) ends with the quote.
        end = text.find(outer, start, view.line_end(start))
        if end >= 0:
            return start, end, STRONG
    at_line_end = start >= view.line_end(start)
    if op in (":", "："):
        if key_quote:
            return start, value_end(view, start, Form.WORD, in_string=False), STRONG
        if at_line_end:
            return _next_line_value(view, key_start, start)
        if sep.end("op") == start:  # `key:value`, no blank
            if key.startswith("-"):
                return start, value_end(view, start, Form.WORD), STRONG
            if text.startswith("//", start):
                return None  # a URL's scheme
            return start, value_end(view, start, Form.WORD), SHAPED
        block = _BLOCK_INDICATOR.match(text, start)
        if block is not None:
            return _block_value(view, key_start, block.end())
        form = Form.SCALAR if _heads_line(view, key_start) else Form.WORD
        return start, value_end(view, start, form), LOOSE
    if at_line_end:
        return None  # `password=` with nothing after it
    if text.startswith("{", start) and not text.startswith("{{", start):
        end = quoted_end(view, start + 1, "{")  # a braced ODBC value: `Pwd={a;b}`
        if '"' not in text[start:end] and ":" not in text[start:end]:
            return start + 1, end, STRONG
    before = text[key_start - 1] if key_start > 0 else "\n"
    if before in "?&#":
        form = Form.URL_PARAM
    elif before == ";":
        form = Form.FIELD
    elif sep.start("op") > key_start + len(key) and _heads_line(view, key_start):
        form = Form.SCALAR  # `key = value` of INI, TOML, HCL: the rest of the line
    else:
        form = Form.WORD
    return start, value_end(view, start, form), STRONG


def _after_blank(view: TextView, key_start: int, key_end: int, key: str) -> Found | None:
    """The forms without an operator: flags, table cells, columns, a quoted value or a
    configuration directive after a blank, Java properties."""
    text = view.text
    gap = _BLANKS.match(text, key_end)
    if gap is None:
        return None
    start = gap.end()
    if start >= len(text) or text[start] in "\r\n" or text.startswith(("\\n", "\\r"), start):
        return None
    first = text[start]
    if key.startswith("-"):
        # A flag's argument: `--password x`, `-storepass x` (not `-p x`: too short).
        if (not key.startswith("--") and len(key) < 4) or first == "-":
            return None
        if first in "\"'":
            return start + 1, quoted_end(view, start + 1, first), STRONG
        return start, value_end(view, start, Form.WORD), STRONG
    if first == "|":
        if not _in_cell(text, key_start) or _table_header(view, key_start):
            return None
        cell = _BLANKS.match(text, start + 1)
        start = cell.end() if cell else start + 1
        return start, value_end(view, start, Form.CELL), LOOSE
    if first in "\"'":
        # SQL's `PASSWORD 'x'`, `requirepass "x"`, `the password "x"`; not Kubernetes'
        # `secret "payments-tls" not found`, which names a Secret.
        if not (
            _compound(key) or key.isupper() or key.lower() in _DIRECTIVES or _names_password(key)
        ):
            return None
        return start + 1, quoted_end(view, start + 1, first), STRONG
    blanks = text[key_end:start]
    if blanks.strip("\t") == "" or (len(blanks) > 1 and blanks.strip(" ") == ""):
        if key.isupper() and _upper_word(text, start):
            return None  # a table's header row: `USER   PASSWORD   HOST`
        return start, value_end(view, start, Form.COLUMN), LOOSE
    if key.lower() in _DIRECTIVES:
        return start, value_end(view, start, Form.WORD), LOOSE
    if _compound(key):
        if _heads_line(view, key_start):
            return start, value_end(view, start, Form.LINE), LOOSE  # Java properties
        if key_words(key)[-1] not in _SHORT:  # `proxy_pass http://...` is nginx's
            return start, value_end(view, start, Form.WORD), SHAPED
    return None


def _names_password(key: str) -> bool:
    lower = key.lower()
    return "pass" in lower or "pwd" in lower


def _table_header(view: TextView, pos: int) -> bool:
    """Whether the line holding `pos` heads a Markdown table (a rule line follows)."""
    line = _next_line(view, pos)
    return line is not None and _TABLE_RULE.match(view.text, line[0], line[1]) is not None


def _compound(key: str) -> bool:
    """`db_password`, `spring.datasource.password`, `dbPassword`: a key, not a word."""
    inner = key.strip("-_.")
    return any(c in "_.-" for c in inner) or any(
        a.islower() and b.isupper() for a, b in itertools.pairwise(inner)
    )


def _upper_word(text: str, start: int) -> bool:
    end = start
    while end < len(text) and (text[end].isalpha() or text[end] == "_"):
        end += 1
    return end > start and text[start:end].isupper() and (end == len(text) or text[end].isspace())


def _in_cell(text: str, key_start: int) -> bool:
    i = key_start
    while i > 0 and text[i - 1] in " \t":
        i -= 1
    return i > 0 and text[i - 1] == "|"


def _heads_line(view: TextView, key_start: int) -> bool:
    """Whether the key begins its line's content: after the line's start, a log prefix,
    indentation, list markers, Markdown quotes or table bars, `export`."""
    text = view.text
    line = view.line_start(key_start)
    pos = prefix_end(text, line, key_start)
    while pos < key_start and text[pos] in _HEAD:
        pos += 1
    export = _EXPORT.match(text, pos, key_start)
    if export is not None:
        pos = export.end()
    return pos == key_start


def _indent(view: TextView, pos: int) -> int:
    """The indentation of the line holding `pos` (after a log prefix)."""
    text = view.text
    line = view.line_start(pos)
    start = prefix_end(text, line, pos)
    end = start
    while end < pos and text[end] in " \t":
        end += 1
    return end - start


def _next_line(view: TextView, pos: int) -> tuple[int, int] | None:
    """(start, end) of the line after the one holding `pos`."""
    text = view.text
    end = view.line_end(pos)
    brk = _LINE_BREAK.match(text, end)
    if brk is None:
        return None
    start = brk.end()
    return start, view.line_end(start)


def _next_line_value(view: TextView, key_start: int, pos: int) -> Found | None:
    """`password:` at the end of its line: a YAML value on the next, more indented line,
    or a single word on the next line ("the password:\\nS3cr..."). Not a mapping, a
    list or a comment."""
    text = view.text
    line = _next_line(view, pos)
    if line is None:
        return None
    start, end = line
    content = start
    while content < end and text[content] in " \t":
        content += 1
    if content >= end or text[content] in "-#{[" or _MAPPING_KEY.match(text, content, end):
        return None
    value_end_ = value_end(view, content, Form.SCALAR)
    if content - start > _indent(view, key_start):
        return content, value_end_, LOOSE
    word_end = value_end(view, content, Form.WORD)
    if word_end >= value_end_:
        return content, word_end, LOOSE
    return None


def _block_value(view: TextView, key_start: int, pos: int) -> Found | None:
    """The lines of a YAML block scalar (`password: |`): all more indented than the key."""
    text = view.text
    key_indent = _indent(view, key_start)
    first = last = -1
    line = _next_line(view, pos)
    while line is not None:
        start, end = line
        content = start
        while content < end and text[content] in " \t":
            content += 1
        if content < end:
            if content - start <= key_indent:
                break
            if first < 0:
                first = content
            last = view.blank_run_start(end)
        line = _next_line(view, end)
    return (first, last, STRONG) if first >= 0 else None


def _pair_value(view: TextView, name: int, key_end: int) -> Found | None:
    """The value of an entry that names the key: `- name: DB_PASSWORD` / `value: x`
    (YAML or JSON env entries, either order), `<add key="Password" value="x"/>`,
    `<entry key="password">x</entry>`."""
    text = view.text
    after = _VALUE_AFTER.match(text, key_end)
    if after is not None:
        quote = after.group("vq")
        start = after.end()
        if quote:
            return start, quoted_end(view, start, quote), STRONG
        return start, value_end(view, start, Form.SCALAR), STRONG
    if text.startswith(('">', "'>"), key_end):  # <entry key="password">x</entry>
        element = text.rfind("<", max(0, name - _LOOK_BACK), name) + 1
        tag = _TAG_NAME.match(text, element, name)
        return _xml_text(view, key_end + 2, f"</{tag.group()}>") if element and tag else None
    return _value_before(view, name)


def _value_before(view: TextView, name: int) -> Found | None:
    """`- value: x` / `  name: DB_PASSWORD`, `{"value": "x", "name": "DB_PASSWORD"}`,
    `<add value="x" key="Password"/>`: the value written before the name, within its
    entry (bounded: an entry's own lines)."""
    text = view.text
    floor = max(0, name - _LOOK_BACK)
    # The entry starts at its list item (`- `), its brace or its tag, whichever is last.
    brace = max(text.rfind("{", floor, name), text.rfind("<", floor, name))
    item = text.rfind("- ", floor, name)
    if item >= 0 and (item == 0 or text[item - 1] in " \t\n") and text.rfind("\n", item, name) < 0:
        return None  # `- name: X` starts the entry: its value comes after it
    floor = max(floor, brace, item)
    last = None
    for match in _VALUE_BEFORE.finditer(text, floor, name):
        last = match
    if last is None:
        return None
    start = last.end()
    quote = last.group("vq")
    end = quoted_end(view, start, quote) if quote else value_end(view, start, Form.SCALAR)
    return (start, min(end, name), STRONG) if start < name else None


# -- anchors ------------------------------------------------------------------------------

# Key characters after a keyword, ASCII or not (`contraseña`).
_TAIL = r"(?:[A-Za-z0-9_.\-]|[^\x00-\x7f])*"
_TO_TEXT_END = re.compile(rf"{_TAIL}(?:\\{{0,3}}[\"'])?[ \t]*\Z")


def _ends_text(length: int) -> Confirm:
    """Whether the last occurrence of a keyword of `length` characters ends its text as
    a key (a name whose value stood before it, at the very end of a text)."""

    def confirm(text: str, starts: list[int]) -> bool:
        return bool(starts) and _TO_TEXT_END.match(text, starts[-1] + length) is not None

    return confirm


@cache  # one Anchor per keyword: detectors sharing it share its prefilter work
def key_anchor(keyword: str) -> Anchor:
    """Where `find_values` can match: a key holding `keyword` followed by an operator, a
    table bar, a tag, a line break or the end of a JSON pair (a name whose value comes
    before or after it), or a blank and more text."""
    k = re.escape(keyword).replace("\\ ", " ")
    key = rf"{k}{_TAIL}{QUOTE}"
    after = rf"[ \t]*(?:[:=|<>,}}]|：|＝|[\r\n]|\\[nr])|[ \t]+[^{SPACE}\x00]"
    quick = rf"{key}(?:{after})"
    # Hyperscan has no end of text but the buffer's (a job's texts are scanned joined):
    # a key ending its text is confirmed in Python at the keyword's last occurrence.
    return Anchor(
        keyword,
        caseless=keyword.isascii() or keyword == keyword.lower(),
        pattern=rf"{quick}|{key}[ \t]*$",
        split=Split(quick, _ends_text(len(keyword))),
    )


def keyvalue_detector(*rules: KeyValueRule) -> Apply:
    def apply(view: TextView) -> list[Edit]:
        edits: list[Edit] = []
        for rule in rules:
            edits.extend(find_values(view, rule))
        return edits

    return apply
