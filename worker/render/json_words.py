"""Why a text is not JSON, said for the person who wrote it."""

import orjson

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
