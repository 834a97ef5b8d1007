"""URLs and connection strings: the password of `scheme://user:password@host` (a
database URL, a broker URL, a Git remote), or a bare token used as its user name; the
same written without a scheme (`app:S3cr@db:3306`, Go's `app:S3cr@tcp(db:3306)/x`),
JSON-escaped (`https:\\/\\/u:S3cr@host`) or percent-encoded
(`https%3A%2F%2Fu%3AS3cr%40host`, a URL in a query string).

In a URL's user information the password runs to the `@` before the host (the last one:
a password may hold `@`); `/`, `?` and `#` end the authority, so a password cannot hold
them unencoded (RFC 3986).
"""

import re

from worker.masking.detectors.base import SECRETS, SPACE, Anchor, Detector, Edit, register
from worker.masking.text import TextView, is_placeholder, is_placeholder_span, looks_random

REPLACEMENT = "[MASKED_PASSWORD]"

_URL_USERINFO = re.compile(
    r"(?P<user>[^\s/?#@:\"'<>\\\x00]*)(?::(?P<password>[^\s/?#\"'<>\\\x00]+))?@"
    r"(?=[A-Za-z0-9\[])"
)
_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")
# Where a URL's scheme ends, as written: plain, JSON-escaped, percent-encoded.
_SCHEME_ENDS = ("://", ":\\/\\/")
_ENCODED_SCHEME_END = "%3a%2f%2f"
_ENCODED_STOP = re.compile(r"[\s&\"'<>\\]|%2[fF]|%3[fF]|%23")
# A user name of a URL without a scheme, what may stand before it in its word
# (`DSN=app:...`), and schemes that take no `//` (`mailto:x@y`).
_USER_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.+-")
_BEFORE_USER = frozenset("=(,;[{|<>")
_NOT_USERS = frozenset({"mailto", "sip", "sips", "xmpp", "tel", "im", "acct", "urn", "news"})
_TOKEN_START = frozenset(" \t\r\n\v\f\"'`\x00")
_DIGEST = re.compile(r"sha\d{1,3}:|md5:", re.IGNORECASE)  # image@sha256:..., a digest
_HOST_START = re.compile(r"[A-Za-z0-9\[]")


def _scheme_urls(view: TextView, edits: list[Edit]) -> None:
    text = view.text
    for end in _SCHEME_ENDS:
        for pos in view.find_all(end):
            scheme_start = pos
            while scheme_start > 0 and text[scheme_start - 1] in _SCHEME_CHARS:
                scheme_start -= 1
            if scheme_start == pos:
                continue
            match = _URL_USERINFO.match(text, pos + len(end))
            if match is None:
                continue
            password = match.group("password")
            if password is not None:
                if not is_placeholder(password):
                    edits.append((match.start("password"), match.end("password"), REPLACEMENT))
            else:
                user = match.group("user")
                # A bare token used as the user name (`https://<token>@github.com`).
                if len(user) >= 20 and looks_random(user) and not is_placeholder(user):
                    edits.append((match.start("user"), match.end("user"), "[MASKED_TOKEN]"))


def _encoded_urls(view: TextView, edits: list[Edit]) -> None:
    """`https%3A%2F%2Fuser%3AS3cr%40host`: the authority ends at an encoded `/`, `?`,
    `#` or where the query parameter holding the URL does."""
    lowered = view.lowered
    read_to = 0
    for pos in view.find_all(_ENCODED_SCHEME_END):
        if pos < read_to:
            continue  # inside the authority of the URL before: masked with it
        start = pos + len(_ENCODED_SCHEME_END)
        stop = read_to = view.next_at(_ENCODED_STOP, start)
        at = lowered.rfind("%40", start, stop)
        if at < 0:
            continue
        colon = lowered.find("%3a", start, at)
        if colon >= 0 and colon + 3 < at:
            edits.append((colon + 3, at, REPLACEMENT))


def _schemeless(view: TextView, edits: list[Edit]) -> None:
    """`app:S3cr@db:3306`, `DSN=app:S3cr@tcp(db:3306)/payments`: `user:password`
    before an `@` and a host, in a word with no scheme."""
    text = view.text
    token_end = -1
    colon = slash = user = -1
    for at in view.find_all("@"):
        if at >= token_end:
            # The word holding this `@`, read once for all the `@` it holds: its first
            # `:`, the `/` after it, the user name before it.
            token_start = at
            while token_start > 0 and text[token_start - 1] not in _TOKEN_START:
                token_start -= 1
            token_end = view.next_at(_BLANK, at)
            colon = text.find(":", token_start, token_end)
            slash = text.find("/", colon, token_end) if colon >= 0 else -1
            user = colon
            while user > token_start and text[user - 1] in _USER_CHARS:
                user -= 1
            if (
                user == colon
                or (user > token_start and text[user - 1] not in _BEFORE_USER)
                or text[user:colon].lower() in _NOT_USERS
            ):
                colon = -1
        if colon < 0 or at <= colon + 1 or 0 <= slash < at:
            continue  # no password, or a URL's path (a scheme's URL: `_scheme_urls`)
        host = at + 1
        if _HOST_START.match(text, host) and not _DIGEST.match(text, host):
            edits.append((colon + 1, at, REPLACEMENT))


_BLANK = re.compile(r"[\s\x00]")


def _url_credentials(view: TextView) -> list[Edit]:
    edits: list[Edit] = []
    if view.find_all("@") or view.find_all("%40"):
        _scheme_urls(view, edits)
        _encoded_urls(view, edits)
        _schemeless(view, edits)
    return [e for e in edits if e[2] != REPLACEMENT or not is_placeholder_span(view, e[0], e[1])]


register(
    Detector(
        "url_credentials",
        SECRETS,
        REPLACEMENT,
        (
            Anchor("://", pattern=rf"://[^{SPACE}/?#\"'<>\\\x00]*@"),
            Anchor(":\\/\\/", pattern=rf":\\\\/\\\\/[^{SPACE}/?#\"'<>\\\x00]*@"),
            Anchor("%3a%2f%2f", pattern=rf"%3a%2f%2f[^{SPACE}&\"'<>\\\x00]*%40"),
            # A word `user:password@host`, no scheme.
            Anchor("@", pattern=rf"[A-Za-z0-9_.+\-]:[^{SPACE}\"'`\x00]*@[A-Za-z0-9\[]"),
        ),
        _url_credentials,
    ),
)
