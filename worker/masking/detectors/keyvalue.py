"""Key-value credentials: `password: x`, `DB_PASSWORD=x`, `--token x`, `Cookie: a=b`.

Where a key's value is, which keys name a credential, and the anchors of a keyword are
`keys`; this module holds the detectors of the family.
"""

import re

from worker.masking.detectors import keys, vocabulary
from worker.masking.detectors.base import (
    SECRETS,
    Anchor,
    Detector,
    Edit,
    chain,
    regex_detector,
    register,
)
from worker.masking.detectors.keys import key_anchor, keyvalue_detector, rule_anchors
from worker.masking.text import MASK_PREFIX, TextView, is_placeholder_span

_OPENSHIFT_TOKEN = re.compile(r"sha256~[A-Za-z0-9_-]{20,}")


# -- cookies --------------------------------------------------------------------------

# After a key ending in `cookie` (`Cookie:`, `Set-Cookie:`, `"cookie": "`, `--cookie '`):
# a list of `name=value` pairs separated by `;`. Every value is masked (a session is
# any of them), names stay, and so do the attributes of `Set-Cookie` (`Path=/`).
_COOKIE_SEPARATOR = re.compile(r"(?:\\{0,3}[\"'])?[ \t]*[:=][ \t]*(?:\\{0,3}[\"'])?")
_COOKIE_FLAG_GAP = re.compile(r"[ \t]+(?:\\{0,3}[\"'])?")
# The ends of a cookie's name (an HTTP token) and of its value (RFC 6265 cookie-octets,
# also stopping at a JSON escape and at a `'`, which ends a quoted shell argument).
_COOKIE_NAME_STOP = re.compile(r"[^!#$%&'*+\-.^_`|~0-9A-Za-z]")
_COOKIE_VALUE_STOP = re.compile(r"[\s\"';,\\]")
_COOKIE_NEXT = re.compile(r"[ \t]*;[ \t]*")
_SET_COOKIE_ATTRIBUTES = frozenset(
    {"path", "domain", "expires", "max-age", "samesite", "priority", "version", "comment"}
)


def _cookie_pairs(view: TextView, pos: int) -> tuple[list[tuple[int, int, int]], int]:
    """(name start, value start, value end) of each pair of the list at `pos`, and where
    the list ends."""
    text = view.text
    pairs: list[tuple[int, int, int]] = []
    while True:
        name_end = view.next_at(_COOKIE_NAME_STOP, pos)
        if name_end == pos or not text.startswith("=", name_end):
            return pairs, pos
        value_end = view.next_at(_COOKIE_VALUE_STOP, name_end + 1)
        pairs.append((pos, name_end + 1, value_end))
        gap = _COOKIE_NEXT.match(text, value_end)
        if gap is None:
            return pairs, value_end
        pos = gap.end()


def _cookie(view: TextView) -> list[Edit]:
    text = view.text
    edits: list[tuple[int, int, str]] = []
    # A key inside a list already read is one of its cookies, not another header.
    read_to = 0
    for key_start, key_end, key, norm in keys.keys_around(view, "cookie"):
        if key_start < read_to or not vocabulary.owns_cookie(key, norm):
            continue
        gap = _COOKIE_SEPARATOR.match(text, key_end)
        if gap is None and key.startswith("--"):
            gap = _COOKIE_FLAG_GAP.match(text, key_end)
        if gap is None:
            continue
        pairs, read_to = _cookie_pairs(view, gap.end())
        set_cookie = norm.endswith("setcookie")
        for index, (name_start, start, end) in enumerate(pairs):
            if (
                set_cookie
                and index
                and text[name_start : start - 1].lower() in _SET_COOKIE_ATTRIBUTES
            ):
                continue
            if (
                end > start
                and not text.startswith(MASK_PREFIX, start)
                and not is_placeholder_span(view, start, end)
            ):
                edits.append((start, end, "[MASKED_COOKIE]"))
    return edits


def _rule_detector(name: str, rule: vocabulary.KeyValueRule) -> Detector:
    return Detector(
        name,
        SECRETS,
        rule.replacement,
        rule_anchors(rule),
        keyvalue_detector(rule),
    )


register(
    Detector(
        "cookie",
        SECRETS,
        "[MASKED_COOKIE]",
        (key_anchor("cookie"),),
        _cookie,
    ),
    Detector(
        "token",
        SECRETS,
        vocabulary.TOKEN.replacement,
        (*rule_anchors(vocabulary.TOKEN), Anchor("sha256~")),
        chain(
            regex_detector(_OPENSHIFT_TOKEN, "[MASKED_TOKEN]"), keyvalue_detector(vocabulary.TOKEN)
        ),
    ),
    _rule_detector("api_key", vocabulary.API_KEY),
    _rule_detector("password", vocabulary.PASSWORD),
    _rule_detector("secret", vocabulary.SECRET),
    _rule_detector("credentials", vocabulary.CREDENTIALS),
    _rule_detector("encryption_key", vocabulary.ENCRYPTION_KEY),
    _rule_detector("session_id", vocabulary.SESSION),
)
