"""Why a text is not JSON, said for the person who wrote it."""

import re

import orjson

# How `json_error_words` says where: " (line L, column C)" at the end.
_WHERE = re.compile(r" \(line (\d+), column (\d+)\)$")

# orjson's reasons (the start of its message), in the words of someone fixing the input.
_JSON_REASONS = (
    ("unexpected end of data", "the text ends before the JSON value does"),
    ("unexpected content after document", "more text after the JSON value"),
    ("trailing comma", "a comma before a closing bracket"),
    ("number is infinity", "a number too large for a double"),
    ("unexpected control character", "an unescaped control character inside a string"),
    ("no low surrogate", "a lone surrogate escape inside a string"),
    ("str is not valid UTF-8", "bytes that are not UTF-8 text"),
)


def json_error_words(exc: orjson.JSONDecodeError) -> str:
    """Why a text is not JSON and where, in words a user would write rather than the
    parser's ("invalid literal, expected 'null'")."""
    if exc.msg.startswith(("Input is a zero-length", "input data is empty")):
        return "the text is empty"
    where = f" (line {exc.lineno}, column {exc.colno})"
    for start, reason in _JSON_REASONS:
        if exc.msg.startswith(start):
            return reason + where
    if exc.msg.startswith("invalid literal"):
        return "unquoted text that is not true, false or null" + where
    if exc.msg.startswith("unexpected character") and exc.pos < len(exc.doc):
        # orjson says what it expected there: "a JSON value", "a string key", ...
        _, _, expected = exc.msg.partition(", expected ")
        instead = f", expected {expected}" if expected else ""
        return f"unexpected {exc.doc[exc.pos]!r}{instead}{where}"
    return "cannot be read as JSON" + where


def shift_position(message: str, first_line: int, first_column: int = 1) -> str:
    """`message` (ending as `json_error_words` ends) with its position counted in a
    larger text, where the JSON value's line 1 is line `first_line` and starts at
    `first_column`; other messages unchanged."""
    where = _WHERE.search(message)
    if where is None:
        return message
    line, column = int(where[1]), int(where[2])
    if line == 1:
        column += first_column - 1
    return f"{message[: where.start()]} (line {line + first_line - 1}, column {column})"
