"""JSON Web Tokens in every shape they reach a log: signed (three segments) and encrypted
(JWE, five segments, the second empty for direct encryption), with the usual `eyJ`
header or one whose JSON starts with a blank or a line break (`eyAi`, `ewog`,
`ew0K`...), on one line or wrapped over several (a terminal's or a log collector's width).

A token is the run of base64url characters and dots from its header; when that run
ends its line and the next lines are wholly such runs, they are its continuation.
"""

import base64
import binascii
import re

from worker.masking.detectors.base import SECRETS, Anchor, Detector, Edit, register
from worker.masking.text import MASK_PREFIX, TextView, occurrences

REPLACEMENT = "[MASKED_JWT]"

# base64url of how a JSON header starts: `{"`, and `{ "`, `{\n `, `{\n\t`, `{\n"`,
# `{\r\n`, `{\t"` for a header written with blanks.
HEADERS = ("eyJ", "eyAi", "ewog", "ewoJ", "ewoi", "ew0K", "ewki")
_RUN = re.compile(r"[A-Za-z0-9_\-.]+")
_SEGMENT = re.compile(r"[A-Za-z0-9_\-]*")
_LINE_BREAK = re.compile(r"\r?\n|\\r\\n|\\n")
_BLANKS = re.compile(r"[ \t]*")
_WRAPPED_LINES = 64  # a 4 KB token wrapped at 64 columns


def _shaped(token: str) -> bool:
    """Three segments (header, claims, signature: possibly empty, `alg: none`) or five
    (JWE: header, key (empty for `dir`), IV, ciphertext, tag)."""
    parts = token.split(".")
    if len(parts) == 3:
        return len(parts[0]) >= 7 and len(parts[1]) >= 4
    if len(parts) == 5:
        return len(parts[0]) >= 7 and all(len(p) >= 4 for p in parts[2:])
    return False


def _json_header(segment: str) -> bool:
    """Whether a header not starting `eyJ` decodes to a JOSE header."""
    try:
        decoded = base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))
    except (binascii.Error, ValueError):
        return False
    return decoded.lstrip().startswith(b"{") and any(
        key in decoded for key in (b'"alg"', b'"enc"', b'"typ"', b'"kid"')
    )


def _token_end(view: TextView, start: int) -> tuple[int, str]:
    """Where the token starting at `start` ends, following its wrapped lines, and the
    token without its line breaks."""
    text = view.text
    run = _RUN.match(text, start)
    end = run.end() if run else start
    pieces = [text[start:end]]
    for _ in range(_WRAPPED_LINES):
        if end != view.line_end(end):
            break
        brk = _LINE_BREAK.match(text, end)
        if brk is None:
            break
        following = _RUN.match(text, brk.end())
        if following is None:
            break
        after = _BLANKS.match(text, following.end())
        stop = after.end() if after else following.end()
        if stop != view.line_end(stop):
            break  # the next line holds more than a token's piece
        pieces.append(following.group())
        end = following.end()
    return end, "".join(pieces)


def _jwt(view: TextView) -> list[Edit]:
    text = view.text
    edits: list[Edit] = []
    read_to = 0
    for pos, header in sorted((p, h) for h in HEADERS for p in occurrences(text, h)):
        if pos < read_to:
            continue  # inside a run read already (a token, or not one)
        if pos > 0 and (text[pos - 1].isalnum() or text[pos - 1] in "_-"):
            continue  # inside a longer run: not where a token starts
        end, token = _token_end(view, pos)
        read_to = end
        token = token.rstrip(".")
        if not _shaped(token):
            continue
        if header != "eyJ" and not _json_header(token.split(".", 1)[0]):
            continue
        while end > pos and text[end - 1] == ".":
            end -= 1  # the full stop of a sentence
        if not text.startswith(MASK_PREFIX, pos):
            edits.append((pos, end, REPLACEMENT))
    return edits


register(
    Detector(
        "jwt",
        SECRETS,
        REPLACEMENT,
        tuple(Anchor(h, caseless=False) for h in HEADERS),
        _jwt,
    ),
)
