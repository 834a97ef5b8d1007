"""Where a key stands on its line, and what the lines around it hold: whether it heads
its line (after a log prefix, indentation, list markers, Markdown quotes and table bars,
`export`), the line's indentation, a value on the next line or in a YAML block scalar,
whether the line is a table's header. What the keys of one line share is read once per
line (`TextView.cache`), however many keys it holds.
"""

import re
from typing import cast

from worker.masking.detectors.values import BLOCK, LOOSE, Form, Found, value_end
from worker.masking.prefixes import prefix_end
from worker.masking.text import TextView

# What may stand between a line's start (or log prefix) and a key at its head:
# indentation, list markers, Markdown quotes and tables, comment marks.
_HEAD = frozenset(" \t-*>#|+")


_EXPORT = re.compile(r"(?:export|set|setx|ENV|declare -x|local)[ \t]+")


_TABLE_RULE = re.compile(r"[ \t]*(?:\|[ \t]*)?:?-{3,}")


_HEADER_ROW = re.compile(r"[A-Z][A-Z_.\-]*(?:[ \t]+[A-Z][A-Z_.\-]*)*[ \t]*")


_LINE_BREAK = re.compile(r"\r?\n|\\r\\n|\\n")


_MAPPING_KEY = re.compile(r"[^\s:#][^:\n]*:(?:[ \t]|$|\r?\n)")


def line_head(view: TextView, pos: int) -> tuple[int, int]:
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


def heads_line(view: TextView, key_start: int) -> bool:
    """Whether the key begins its line's content: after the line's start, a log prefix,
    indentation, list markers, Markdown quotes or table bars, `export`."""
    _, head = line_head(view, key_start)
    if head == key_start:
        return True
    export = _EXPORT.match(view.text, head, key_start)
    return export is not None and export.end() == key_start


def indent(view: TextView, pos: int) -> int:
    """The indentation of the line holding `pos` (after a log prefix)."""
    text = view.text
    content, head = line_head(view, pos)
    end = content
    while end < head and text[end] in " \t":
        end += 1
    return end - content


def next_line(view: TextView, pos: int) -> tuple[int, int] | None:
    """(start, end) of the line after the one holding `pos`."""
    text = view.text
    end = view.line_end(pos)
    brk = _LINE_BREAK.match(text, end)
    if brk is None:
        return None
    start = brk.end()
    return start, view.line_end(start)


def next_line_value(view: TextView, key_start: int, pos: int) -> Found | None:
    """`password:` at the end of its line: a YAML value on the next, more indented line,
    or a single word on the next line ("the password:\\nS3cr..."). Not a mapping, a
    list or a comment."""
    text = view.text
    line = next_line(view, pos)
    if line is None:
        return None
    start, end = line
    content = start
    while content < end and text[content] in " \t":
        content += 1
    if content >= end or text[content] in "-#{[" or _MAPPING_KEY.match(text, content, end):
        return None
    value_end_ = value_end(view, content, Form.SCALAR)
    if content - start > indent(view, key_start):
        return content, value_end_, LOOSE
    word_end = value_end(view, content, Form.WORD)
    if word_end >= value_end_:
        return content, word_end, LOOSE
    return None


def block_value(view: TextView, key_start: int, pos: int) -> Found | None:
    """The lines of a YAML block scalar (`password: |`): all more indented than the key."""
    text = view.text
    key_indent = indent(view, key_start)
    first = last = -1
    line = next_line(view, pos)
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
        line = next_line(view, end)
    return (first, last, BLOCK) if first >= 0 else None


def table_header(view: TextView, pos: int) -> bool:
    """Whether the line holding `pos` heads a Markdown table (a rule line follows);
    decided once per line."""
    line = view.line_start(pos)
    headers = view.cache.setdefault("table_headers", {})
    assert isinstance(headers, dict)
    found = headers.get(line)
    if found is None:
        following = next_line(view, pos)
        found = headers[line] = following is not None and bool(
            _TABLE_RULE.match(view.text, following[0], following[1])
        )
    return bool(found)


def header_row(view: TextView, pos: int) -> bool:
    """Whether the line holding `pos` is a table's header: upper-case words only."""
    content, _ = line_head(view, pos)
    return _HEADER_ROW.fullmatch(view.text, content, view.line_end(pos)) is not None


def in_cell(text: str, key_start: int) -> bool:
    i = key_start
    while i > 0 and text[i - 1] in " \t":
        i -= 1
    return i > 0 and text[i - 1] == "|"
