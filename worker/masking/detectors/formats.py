"""Passwords in the formats of credential files and SQL: `.netrc` entries, `.pgpass`
lines, and the statements that set a database user's password.

XML elements, ODBC and ADO connection strings, Java properties and INI files are keys
and values (`keys`); these formats say which field is the password by position or by
a grammar of their own.
"""

import re

from worker.masking.detectors.base import SECRETS, SPACE, Anchor, Detector, Edit, register
from worker.masking.detectors.values import Form, quoted_end, reads_as_prose, value_end
from worker.masking.linear_regex import LinearPattern
from worker.masking.text import MASK_PREFIX, TextView, is_placeholder_span

REPLACEMENT = "[MASKED_PASSWORD]"

# -- .netrc -----------------------------------------------------------------------------

# `machine HOST` (or `default`) and its fields in any order, `login`, `account`,
# `port`, `password`, each followed by a token; tokens separated by any whitespace,
# JSON-escaped line breaks included. An entry needs a field besides the password, so
# prose ("the machine learning password is rotated", "default password policy") is no
# entry.
_NETRC_SPACE = r"(?:[ \t\r\n]|\\[nrt])"
_NETRC_GAP = rf"{_NETRC_SPACE}+"
_NETRC_TOKEN = r"(?:[^ \t\r\n\x00\\]|\\[^nrt\x00])+"
_NETRC_FIELD = rf"{_NETRC_GAP}(?:login|account|port|password){_NETRC_GAP}{_NETRC_TOKEN}"
_NETRC_ENTRY = LinearPattern(
    rf"(?:machine{_NETRC_GAP}{_NETRC_TOKEN}|default)(?:{_NETRC_FIELD}){{1,8}}"
)
_NETRC_PASSWORD = re.compile(rf"{_NETRC_GAP}password{_NETRC_GAP}(?P<value>{_NETRC_TOKEN})")
_NETRC_OTHER = re.compile(rf"{_NETRC_GAP}(?:login|account|port){_NETRC_GAP}")


def _netrc(view: TextView) -> list[Edit]:
    text = view.text
    edits: list[Edit] = []
    for start, end in _NETRC_ENTRY.spans(text):
        if _NETRC_OTHER.search(text, start, end) is None:
            continue
        for match in _NETRC_PASSWORD.finditer(text, start, end):
            value = match.start("value")
            if text.startswith('"', value):  # a quoted token (curl and inetutils read them)
                edits.append((value + 1, quoted_end(view, value + 1, '"'), REPLACEMENT))
            else:
                edits.append((value, match.end("value"), REPLACEMENT))
    return edits


# -- .pgpass ----------------------------------------------------------------------------

# `hostname:port:database:username:password`, one entry a line; `\:` escapes a colon.
# The host holds a letter, a dot or is `*` (so `12:30:45:...` is no entry); the port is
# PostgreSQL's range (5000-6999: 5432, PgBouncer's 6432) or `*`, which keeps the anchor
# led by `:5`, `:6`, `:*` (any port made every job's scan measurably slower); the
# password is the rest of the line.
_PORT = r"(?:[56][0-9]{3}|\*)"
_PGPASS_FIELD = rf"(?:[^:{SPACE}\\\x00]|\\[^{SPACE}\x00])+"
_PGPASS = LinearPattern(
    rf"(?:(?m:^)|\\n)[^:{SPACE}\\\x00]*[A-Za-z.*][^:{SPACE}\\\x00]*:{_PORT}:"
    rf"{_PGPASS_FIELD}:{_PGPASS_FIELD}:(?P<value>(?:[^\r\n\\\x00]|\\[^nr\x00])+)"
)


def _pgpass(view: TextView) -> list[Edit]:
    return [(start, end, REPLACEMENT) for start, end in _PGPASS.spans(view.text, "value")]


# -- SQL --------------------------------------------------------------------------------

# `IDENTIFIED BY 'x'` (MySQL, Oracle: also unquoted), `IDENTIFIED WITH plugin BY 'x'`,
# `PASSWORD('x')` (MySQL's function). `PASSWORD 'x'` and `PASSWORD = 'x'` (PostgreSQL,
# SQL Server) are a key and a quoted value (`keys`).
_IDENTIFIED_BY = re.compile(
    r"identified[ \t]+(?:with[ \t]+[^ \t\r\n]+[ \t]+)?(?:by|as)[ \t]+N?(?P<quote>['\"]?)",
    re.IGNORECASE,
)
_PASSWORD_FUNCTION = re.compile(r"password[ \t]*\([ \t]*(?P<quote>['\"])", re.IGNORECASE)


def _sql_password(view: TextView) -> list[Edit]:
    text = view.text
    edits: list[Edit] = []
    for literal, pattern in (("identified", _IDENTIFIED_BY), ("password", _PASSWORD_FUNCTION)):
        for pos in view.find_all(literal):
            match = pattern.match(text, pos)
            if match is None:
                continue
            start = match.end()
            quote = match.group("quote")
            if quote:
                end = quoted_end(view, start, quote)
            else:
                end = value_end(view, start, Form.WORD)
                while end > start and text[end - 1] in ";,)":
                    end -= 1  # `IDENTIFIED BY tiger;`
                if reads_as_prose(text, start, end):
                    continue  # "the user identified by the badge"
            edits.append((start, end, REPLACEMENT))
    return edits


def _kept(view: TextView, edits: list[Edit]) -> list[Edit]:
    text = view.text
    return [
        edit
        for edit in edits
        if edit[1] > edit[0]
        and not text.startswith(MASK_PREFIX, edit[0])
        and not is_placeholder_span(view, edit[0], edit[1])
    ]


register(
    Detector(
        "netrc",
        SECRETS,
        REPLACEMENT,
        (
            # A password between two gaps, which every entry holds. The entry's whole
            # sequence, or `machine` and a gap, made every job's scan measurably
            # slower (docs/PERFORMANCE.md, "Masking").
            Anchor("password", caseless=False, pattern=rf"{_NETRC_SPACE}password{_NETRC_SPACE}"),
        ),
        lambda view: _kept(view, _netrc(view)),
    ),
    Detector(
        "pgpass",
        SECRETS,
        REPLACEMENT,
        (
            Anchor(
                ":",
                caseless=False,
                pattern=rf":{_PORT}:{_PGPASS_FIELD}:{_PGPASS_FIELD}:",
            ),
        ),
        lambda view: _kept(view, _pgpass(view)),
    ),
    Detector(
        "sql_password",
        SECRETS,
        REPLACEMENT,
        (
            Anchor(
                "identified",
                pattern=r"identified[ \t]+(?:with[ \t]+[^ \t\r\n\x00]+[ \t]+)?(?:by|as)[ \t]",
            ),
            Anchor("password", pattern=r"password[ \t]*\([ \t]*['\"]"),
        ),
        lambda view: _kept(view, _sql_password(view)),
    ),
)
