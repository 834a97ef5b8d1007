"""Values an entry names rather than follows: an XML element's text (`<password>x
</password>`, Hadoop's `<name>x.password</name><value>x</value>`), and the value of an
entry naming its key (`- name: DB_PASSWORD` / `value: x` in either order, `{"name": ...,
"value": ...}`, `<add key="Password" value="x"/>`, `<entry key="password">x</entry>`).
A look back for a value is bounded: an entry's own few lines, or 512 characters on its
line.
"""

import re

from worker.masking.detectors.values import STRONG, Form, Found, quoted_end, value_end
from worker.masking.text import TextView

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


_HADOOP_VALUE = re.compile(r"(?:\s|\\[nrt]){0,40}<value>")


def element_text(view: TextView, key_start: int, key_end: int) -> Found | None:
    """The text of `<password>x</password>`, or of the `<value>` after Hadoop's
    `<name>x.password</name>`, when the key is such an element's name."""
    text = view.text
    if text.startswith(">", key_end) and text.endswith("<", 0, key_start):
        return xml_text(view, key_end + 1, f"</{text[key_start:key_end]}>")
    if text.endswith("<name>", 0, key_start) and text.startswith("</name>", key_end):
        value = _HADOOP_VALUE.match(text, key_end + 7)
        return xml_text(view, value.end(), "</value>") if value else None
    return None


def name_before(text: str, key_start: int) -> int | None:
    """Where the `name` or `key` naming the key at `key_start` starts (`name:
    DB_PASSWORD`, `key="Password"`), if one does."""
    name = _NAME_BEFORE.search(text, max(0, key_start - 24), key_start)
    return name.start() if name is not None else None


def xml_text(view: TextView, start: int, closing: str) -> Found | None:
    """An element's text, when the element closes right after it."""
    text = view.text
    while start < len(text) and text[start].isspace():
        start += 1
    end = value_end(view, start, Form.XML)
    return (start, end, STRONG) if text.startswith(closing, view.next_at(_TAG, start)) else None


def pair_value(view: TextView, name: int, key_end: int) -> Found | None:
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
        return xml_text(view, key_end + 2, f"</{tag.group()}>") if element and tag else None
    return value_before(view, name)


def value_before(view: TextView, name: int) -> Found | None:
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
