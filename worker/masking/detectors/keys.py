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
    Edit,
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
BLOCK = 3  # a YAML block scalar's lines: STRONG, and no key inside them is one
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
_ENTRY_LINES = 6  # how many lines before its name a YAML entry's value may stand
_QUOTED_NAME = re.compile(r"(?:name|key)\\{0,3}[\"'][ \t]*:|(?:name|key)[ \t]*=", re.IGNORECASE)
_ITEM = re.compile(r"[ \t]*-[ \t]")
_VALUE_LINE = re.compile(r"[ \t]*(?:-[ \t]+)?value[ \t]*:[ \t]*(?P<vq>[\"'])?", re.IGNORECASE)
_TAG = re.compile(r"<")
_TAG_NAME = re.compile(r"[\w.:-]+")
_HEADER_ROW = re.compile(r"[A-Z][A-Z_.\-]*(?:[ \t]+[A-Z][A-Z_.\-]*)*[ \t]*")
# What may follow a quoted value's closing quote without going on with it.
_AFTER_QUOTED = frozenset(" \t\r\n,;)]}>\\/#|")
_TABLE_RULE = re.compile(r"[ \t]*(?:\|[ \t]*)?:?-{3,}")
_HADOOP_VALUE = re.compile(r"(?:\s|\\[nrt]){0,40}<value>")
_BLOCK_INDICATOR = re.compile(r"[|>][-+]?[0-9]?[-+]?[ \t]*(?:#[^\n]*)?(?=\r?\n|\\n|$)")
_LINE_BREAK = re.compile(r"\r?\n|\\r\\n|\\n")
_MAPPING_KEY = re.compile(r"[^\s:#][^:\n]*:(?:[ \t]|$|\r?\n)")
# Directives of configuration files that take their value after a blank.
_DIRECTIVES = frozenset({"requirepass", "masterauth", "masteruser", "identified"})
_SHORT = frozenset({"pass", "pw"})
# Programs whose password flag takes no argument after a blank (it prompts).
_PROMPTING = re.compile(r"(?:\S*/)?(?:mysql|mariadb)[\w-]*[ \t]")


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
        covered = 0  # a value masked already (or a block scalar) holds no key of its own
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
            if strength == BLOCK:
                covered = max(covered, end)  # its lines are its text, whatever it holds
                strength = STRONG
            if not holds_a_value(view, start, end):
                continue
            if is_variable(
                text, key, start, end, lambda name: rule.owns(name, normalise_key(name))
            ):
                continue
            first_word = text[start : min(end, start + 24)].split(maxsplit=1) or [""]
            if is_counter(key, first_word[0]):
                continue  # `tests: pass=42`, `PASS: 118, FAIL: 2`
            path_valued = path_is_reference(rule, norm) and text[key_start - 1 : key_start] != ";"
            if (strength or path_valued) and is_reference(text, start, end):
                continue  # (`PWD=/home/app` is a directory; ODBC's `;PWD=/x` no path)
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
    gap = text[sep.start() + len(key_quote or "") : sep.start("op")]
    if key.startswith("-") and gap:
        return _after_blank(view, key_start, key_start + len(key), key)  # `--password ==x`
    if (len(gap) > 1 or "\t" in gap) and sep.end("op") == sep.end() and not key_quote:
        # A column's gap, then a value starting with `:` or `=` (`PASSWORD    :x`).
        return _after_blank(view, key_start, key_start + len(key), key)
    if op == "==" and (
        sep.start("op") > sep.start() or text.startswith((" ", "\t"), sep.end("op"))
    ):
        return None  # a comparison (`token == ""`), not an assignment
    start = sep.end()
    if op == "==":
        start -= 1  # `password==x`: the value is `=x`
    if value_quote:
        end = quoted_end(view, start, value_quote)
        after = end + len(value_quote)
        if end == start and after < len(text) and text[after] not in _AFTER_QUOTED:
            start -= len(value_quote)  # `''x`: no quoted value, a word starting with quotes
        if not key_quote and after < len(text) and text[after] not in _AFTER_QUOTED:
            # More right after the closing quote (`'x'y`, a shell word; `''00`): the
            # quoted part is only the value's start.
            yaml = op in (":", "：") and _heads_line(view, key_start)
            return start, value_end(view, after, Form.SCALAR if yaml else Form.WORD), STRONG
        return start, end, STRONG
    outer = text[key_start - 1] if key_start > 0 and not key_quote else ""
    if outer in ("'", '"'):
        # A header inside a quoted argument (`-H 'X-API-Key: v'`) ends with the quote.
        end = text.find(outer, start, view.line_end(start))
        if end >= 0:
            return start, end, STRONG
    at_line_end = start >= view.line_end(start)
    if op in (":", "："):
        if key_quote:
            # JSON's unquoted values are numbers and literals: a word there is prose
            # (`volume "db-password" : secret "db-password" not found`).
            return start, value_end(view, start, Form.WORD, in_string=False), SHAPED
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
    if text.startswith("N'", start):  # SQL Server's Unicode string: `PASSWORD = N'x'`
        return start + 2, quoted_end(view, start + 2, "'"), STRONG
    before = text[key_start - 1] if key_start > 0 else "\n"
    if text.startswith("{", start) and not text.startswith("{{", start):
        end = quoted_end(view, start + 1, "{")  # a braced ODBC value: `Pwd={a;b}`
        braced = text.startswith("}", end) and not any(c in text[start:end] for c in '":')
        if braced and (before == ";" or end + 1 >= len(text) or text[end + 1] in "; \t\r\n"):
            return start + 1, end, STRONG
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
        # A flag's argument: `--password x`, `-storepass x` (not `-p x`: too short;
        # not mysql's `--password db`, which prompts).
        if (not key.startswith("--") and len(key) < 4) or first == "-":
            return None
        if _PROMPTING.match(text, _line_head(view, key_start)[1]):
            return None
        if first in "\"'":
            return start + 1, quoted_end(view, start + 1, first), STRONG
        return start, value_end(view, start, Form.WORD), STRONG
    if first == "|" and _in_cell(text, key_start):
        if _table_header(view, key_start):
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
        if key.isupper() and _header_row(view, key_start):
            return None  # a table's header row: `USER   PASSWORD   HOST`
        return start, value_end(view, start, Form.COLUMN), LOOSE
    if key.lower() in _DIRECTIVES:
        return start, value_end(view, start, Form.WORD), LOOSE
    if _compound(key):
        if _heads_line(view, key_start):
            return start, value_end(view, start, Form.LINE), LOOSE  # Java properties
        if (
            key_words(key)[-1] not in _SHORT  # `proxy_pass http://...` is nginx's
            and first != "-"  # the next flag
            and not _names_a_variable(text, key_start)
        ):
            return start, value_end(view, start, Form.WORD), SHAPED
    return None


def _names_a_variable(text: str, key_start: int) -> bool:
    """`docker run -e DB_PASSWORD image`, `-passout env:P12_PASSWORD`: the key is a
    flag's argument or a reference, a variable's name passed on without its value."""
    if key_start > 0 and text[key_start - 1] in ":$={":
        return True
    word_end = key_start
    while word_end > 0 and text[word_end - 1] in " \t":
        word_end -= 1
    word = word_end
    while word > 0 and not text[word - 1].isspace():
        word -= 1
    return word < word_end and text.startswith("-", word)


def _names_password(key: str) -> bool:
    lower = key.lower()
    return "pass" in lower or "pwd" in lower


def _table_header(view: TextView, pos: int) -> bool:
    """Whether the line holding `pos` heads a Markdown table (a rule line follows);
    decided once per line."""
    line = view.line_start(pos)
    headers = view.cache.setdefault("table_headers", {})
    assert isinstance(headers, dict)
    found = headers.get(line)
    if found is None:
        following = _next_line(view, pos)
        found = headers[line] = following is not None and bool(
            _TABLE_RULE.match(view.text, following[0], following[1])
        )
    return bool(found)


def _compound(key: str) -> bool:
    """`db_password`, `spring.datasource.password`, `dbPassword`: a key, not a word."""
    inner = key.strip("-_.")
    return any(c in "_.-" for c in inner) or any(
        a.islower() and b.isupper() for a, b in itertools.pairwise(inner)
    )


def _header_row(view: TextView, pos: int) -> bool:
    """Whether the line holding `pos` is a table's header: upper-case words only."""
    content, _ = _line_head(view, pos)
    return _HEADER_ROW.fullmatch(view.text, content, view.line_end(pos)) is not None


def _in_cell(text: str, key_start: int) -> bool:
    i = key_start
    while i > 0 and text[i - 1] in " \t":
        i -= 1
    return i > 0 and text[i - 1] == "|"


def _line_head(view: TextView, pos: int) -> tuple[int, int]:
    """Where the content of the line holding `pos` starts (after a log prefix), and
    where its head ends (indentation, list markers, Markdown quotes and table bars):
    read once per line, however many keys it holds."""
    text = view.text
    line = view.line_start(pos)
    heads = view.cache.setdefault("line_heads", {})
    assert isinstance(heads, dict)
    found = heads.get(line)
    if found is None:
        end = view.line_end(line)
        content = prefix_end(text, line, end)
        head = content
        while head < end and text[head] in _HEAD:
            head += 1
        found = heads[line] = (content, head)
    return cast("tuple[int, int]", found)


def _heads_line(view: TextView, key_start: int) -> bool:
    """Whether the key begins its line's content: after the line's start, a log prefix,
    indentation, list markers, Markdown quotes or table bars, `export`."""
    _, head = _line_head(view, key_start)
    if head == key_start:
        return True
    export = _EXPORT.match(view.text, head, key_start)
    return export is not None and export.end() == key_start


def _indent(view: TextView, pos: int) -> int:
    """The indentation of the line holding `pos` (after a log prefix)."""
    text = view.text
    content, head = _line_head(view, pos)
    end = content
    while end < head and text[end] in " \t":
        end += 1
    return end - content


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
    return (first, last, BLOCK) if first >= 0 else None


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
    entry (bounded: an entry's own few lines, or its braces or tag on its line)."""
    text = view.text
    quoted = _QUOTED_NAME.match(text, name)
    if quoted is not None:
        # JSON (`"name": "X"`) or an XML attribute (`key="X"`): on the entry's line,
        # after its opening brace or tag.
        line = view.line_start(name)
        found = None
        for match in _VALUE_BEFORE.finditer(text, max(line, name - _LOOK_BACK), name):
            found = match
        if found is None or not found.group("vq"):
            return None
        start = found.end()
        end = quoted_end(view, start, found.group("vq"))
        between = text[end:name]
        if end > name or any(c in between for c in "{}<>"):
            return None  # the value of another entry
        return start, end, STRONG
    # YAML: the entry's lines before the name's, back to its `- ` (a few at most).
    line = view.line_start(name)
    if _ITEM.match(text, line, name):
        return None  # `- name: X` starts the entry: its value comes after it
    for _ in range(_ENTRY_LINES):
        if line == 0:
            return None
        previous = view.line_start(line - 1 if text[line - 1] == "\n" else line - 2)
        value = _VALUE_LINE.match(text, previous, line)
        if value is not None:
            start = value.end()
            if value.group("vq"):
                return start, quoted_end(view, start, value.group("vq")), STRONG
            return start, value_end(view, start, Form.SCALAR), STRONG
        if _ITEM.match(text, previous, line):
            return None  # the entry started without a value
        line = previous
    return None


# -- anchors ------------------------------------------------------------------------------

# Key characters after a keyword. ASCII, but for the keywords whose words go on with
# other letters (`contrase` of `contraseña`, `jelsz` of `jelszó`): the detectors own no
# key whose end is beyond ASCII otherwise (the tail of an owned key is a qualifier).
_TAIL = r"[A-Za-z0-9_.\-]*"
_WIDE_TAIL = r"(?:[A-Za-z0-9_.\-]|[^\x00-\x7f])*"
_WIDE = frozenset({"contrase", "jelsz"})


@cache  # one Anchor per keyword: detectors sharing it share its prefilter work
def key_anchor(keyword: str) -> Anchor:
    """Where `find_values` can match: a key holding `keyword` followed by an operator, a
    table bar, a tag, a line break, a quote closing a name and the end of its pair or
    element (a name whose value comes before or after it), or a blank and more text."""
    k = re.escape(keyword).replace("\\ ", " ")
    tail = _WIDE_TAIL if keyword in _WIDE else _TAIL
    after = (
        rf"{QUOTE}[ \t]*(?:[:=|<>]|：|＝|[\r\n]|\\[nr])"
        rf"|\\{{0,3}}[\"'][ \t]*[,}}/>]"
        rf"|[ \t]+[^{SPACE}\x00]"
    )
    return Anchor(
        keyword,
        caseless=keyword.isascii() or keyword == keyword.lower(),
        pattern=rf"{k}{tail}(?:{after})",
    )


# A YAML entry naming its key after its value (`- value: x` / `  name: DB_PASSWORD`),
# whose name may end the text: no keyword's anchor sees that end (Hyperscan scans a
# job's texts joined), so the value's side is the anchor.
VALUE_BEFORE_NAME = Anchor(
    "value",
    pattern=r"value[ \t]*:[^\r\n\x00]*(?:\r?\n|\\r?\\n)[ \t]*name[ \t]*:",
)


def rule_anchors(rule: KeyValueRule) -> tuple[Anchor, ...]:
    """The anchors of a detector finding `rule`'s keys."""
    return (*(key_anchor(k) for k in rule.keywords), VALUE_BEFORE_NAME)


def keyvalue_detector(*rules: KeyValueRule) -> Apply:
    def apply(view: TextView) -> list[Edit]:
        edits: list[Edit] = []
        for rule in rules:
            edits.extend(find_values(view, rule))
        return edits

    return apply
