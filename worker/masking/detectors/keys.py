"""Finding credentials written as a key and a value, wherever the key stands on its line.

`password: x`, `DB_PASSWORD=x`, `"client_secret": "x"`, `--token x`, `?access_token=x`,
`spring.datasource.password x`, `| password | x |`, `password<TAB>x`, `<password>x
</password>`, a key and its value on the next line or in a YAML block scalar, a
Kubernetes env entry (`name: DB_PASSWORD` with its `value:` after or before it). The
key may follow a log prefix, stand in a sentence or in a table cell.

Driven by the positions of a few keywords rather than by one big case-insensitive
regex (which Python runs slowly, trying every position): the prefilter usually knows
where each keyword is already, and the anchored regexes then run only there. This
module reads what follows a key; which keys name a credential is `vocabulary`, where a
value ends and whether it is one `values`, where a key stands on its line and what the
lines around it hold `layout`, and the values an entry names `entries`.
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
from worker.masking.detectors.entries import element_text, name_before, pair_value
from worker.masking.detectors.layout import (
    block_value,
    header_row,
    heads_line,
    in_cell,
    line_head,
    next_line_value,
    table_header,
)
from worker.masking.detectors.values import (
    BLOCK,
    LOOSE,
    SHAPED,
    STRONG,
    Form,
    Found,
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
from worker.masking.text import TextView, is_key_char

# An operator after a key (a quote closing a quoted key before it), and a quote opening
# the value after it. `：` and `＝` are the full-width forms.
_SEPARATOR = re.compile(
    r"(?P<kq>\\{0,3}[\"'])?[ \t]*(?P<op>:=|=>|==|[:=]|：|＝)[ \t]*(?P<vq>\\{0,3}[\"'])?"
)
_BLANKS = re.compile(r"[ \t]+")
# What may follow a quoted value's closing quote without going on with it.
_AFTER_QUOTED = frozenset(" \t\r\n,;)]}>\\/#|")
_BLOCK_INDICATOR = re.compile(r"[|>][-+]?[0-9]?[-+]?[ \t]*(?:#[^\n]*)?(?=\r?\n|\\n|$)")
_SAID = re.compile(r"(?:is|was)[ \t]+(?:now[ \t]+|still[ \t]+|set to[ \t]+)?(?=[^\s])")
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
    element = element_text(view, key_start, key_end)
    if element is not None:
        return element
    name = name_before(text, key_start)
    if name is not None:
        return pair_value(view, name, key_end)
    return _after_blank(view, key_start, key_end, key)


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
            yaml = op in (":", "：") and heads_line(view, key_start)
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
            return next_line_value(view, key_start, start)
        if sep.end("op") == start:  # `key:value`, no blank
            if key.startswith("-"):
                return start, value_end(view, start, Form.WORD), STRONG
            if text.startswith("//", start):
                return None  # a URL's scheme
            return start, value_end(view, start, Form.WORD), SHAPED
        block = _BLOCK_INDICATOR.match(text, start)
        if block is not None:
            return block_value(view, key_start, block.end())
        form = Form.SCALAR if heads_line(view, key_start) else Form.WORD
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
    elif sep.start("op") > key_start + len(key) and heads_line(view, key_start):
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
        if _PROMPTING.match(text, line_head(view, key_start)[1]):
            return None
        if first in "\"'":
            return start + 1, quoted_end(view, start + 1, first), STRONG
        return start, value_end(view, start, Form.WORD), STRONG
    if first == "|" and in_cell(text, key_start):
        if table_header(view, key_start):
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
    said = _SAID.match(text, start)
    if said is not None:
        # A sentence: "the db password is Tr0ub4dor&3". Only a value that reads as no
        # word ("the password is correct", "token is 3600 seconds" stay).
        value = said.end()
        end = value_end(view, value, Form.WORD)
        if end - value >= 6 and not text[value:end].isdigit():
            return value, end, SHAPED
        return None
    blanks = text[key_end:start]
    if blanks.strip("\t") == "" or (len(blanks) > 1 and blanks.strip(" ") == ""):
        if key.isupper() and header_row(view, key_start):
            return None  # a table's header row: `USER   PASSWORD   HOST`
        return start, value_end(view, start, Form.COLUMN), LOOSE
    if key.lower() in _DIRECTIVES:
        return start, value_end(view, start, Form.WORD), LOOSE
    if _compound(key):
        if heads_line(view, key_start):
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


def _compound(key: str) -> bool:
    """`db_password`, `spring.datasource.password`, `dbPassword`: a key, not a word."""
    inner = key.strip("-_.")
    return any(c in "_.-" for c in inner) or any(
        a.islower() and b.isupper() for a, b in itertools.pairwise(inner)
    )


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
