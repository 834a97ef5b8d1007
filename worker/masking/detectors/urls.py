"""URLs and connection strings: the password of `scheme://user:password@host` (a
database URL, a broker URL, a Git remote), or a bare token used as its user name."""

import re

from worker.masking.detectors.base import SECRETS, SPACE, Anchor, Detector, Edit, register
from worker.masking.text import TextView, is_placeholder, looks_random

# -- credentials in URLs --------------------------------------------------------------

_URL_USERINFO = re.compile(
    r"(?P<user>[^\s/?#@:\"'<>\\\x00]*)(?::(?P<password>[^\s/?#\"'<>\\\x00]+))?@"
    r"(?=[A-Za-z0-9\[])"
)
_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")


def _url_credentials(view: TextView) -> list[Edit]:
    text = view.text
    if "@" not in text:
        return []
    edits = []
    for pos in view.find_all("://"):
        scheme_start = pos
        while scheme_start > 0 and text[scheme_start - 1] in _SCHEME_CHARS:
            scheme_start -= 1
        match = _URL_USERINFO.match(text, pos + 3) if scheme_start < pos else None
        if match is not None:
            password = match.group("password")
            if password is not None:
                if not is_placeholder(password):
                    edits.append(
                        (match.start("password"), match.end("password"), "[MASKED_PASSWORD]")
                    )
            else:
                user = match.group("user")
                # A bare token used as the user name (`https://<token>@github.com`).
                if len(user) >= 20 and looks_random(user) and not is_placeholder(user):
                    edits.append((match.start("user"), match.end("user"), "[MASKED_TOKEN]"))
    return edits


register(
    Detector(
        "url_credentials",
        SECRETS,
        "[MASKED_PASSWORD]",
        (Anchor("://", pattern=rf"://[^{SPACE}/?#\"'<>\\\x00]*@"),),
        _url_credentials,
    ),
)
