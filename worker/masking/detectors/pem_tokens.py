"""PEM blocks and tokens: private keys and certificates, JWTs, GitHub and Slack tokens,
and the values of `Authorization` headers and bearer tokens.

These are exact formats, so they run before the key-value detectors: `Authorization:
Bearer eyJ...` counts as a JWT, and its masked value is left alone after.
"""

import re

from worker.masking.detectors import vocabulary
from worker.masking.detectors.base import (
    LOOSE_QUOTE,
    SECRETS,
    Anchor,
    Apply,
    Detector,
    Edit,
    chain,
    regex_detector,
    register,
)
from worker.masking.detectors.keys import key_anchor, keyvalue_detector
from worker.masking.linear_regex import LinearPattern
from worker.masking.text import (
    TextView,
    is_placeholder,
    is_placeholder_span,
    looks_random,
    looks_random_span,
)

# -- PEM blocks ---------------------------------------------------------------------

# The body: base64, whitespace, JSON-escaped line breaks, and the headers of
# encrypted keys. Without an END line (output cut short) the block ends where that
# alphabet does, so a truncated key is still masked.
_PEM = re.compile(
    r"-----BEGIN (?P<label>[A-Z0-9 ]{1,60})-----"
    r"(?P<body>(?:(?:Proc-Type|DEK-Info|Comment):[^\n\\]*|[A-Za-z0-9+/=\s\\])*)"
    r"(?P<end>-----END [A-Z0-9 ]{1,60}-----)?"
)


def _pem_detector(private: bool) -> Apply:
    replacement = "[MASKED_PRIVATE_KEY]" if private else "[MASKED_CERTIFICATE]"

    def apply(view: TextView) -> list[Edit]:
        text = view.text
        edits = []
        for match in _PEM.finditer(text):
            label = match.group("label")
            is_private = "PRIVATE" in label or "SECRET" in label
            is_certificate = "CERTIFICATE" in label or label == "X509 CRL"
            if is_private if private else is_certificate and not is_private:
                end = match.end()
                if match.group("end") is None:
                    end = _trim_trailing_space(text, match.start("body"), end)
                edits.append((match.start(), end, replacement))
        return edits

    return apply


def _trim_trailing_space(text: str, start: int, end: int) -> int:
    while end > start:
        if text[end - 1] in " \t\r\n":
            end -= 1
        elif text.endswith(("\\n", "\\r"), start, end):
            end -= 2
        elif text[end - 1] == "\\":
            end -= 1
        else:
            break
    return end


# -- tokens of a known shape ----------------------------------------------------------

_JWT = LinearPattern(r"eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*")
_GITHUB = (
    re.compile(r"gh[pousr]_[A-Za-z0-9]{30,255}\b"),
    re.compile(r"github_pat_[A-Za-z0-9_]{22,255}\b"),
)
_SLACK_TOKEN = (
    re.compile(r"xox[abposre]-[A-Za-z0-9-]{8,}"),
    re.compile(r"xapp-[0-9]+-[A-Za-z0-9-]{8,}"),
)
_SLACK_WEBHOOK = re.compile(
    r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<path>[A-Za-z0-9_/-]{8,})"
)


# -- Authorization headers and bearer tokens -----------------------------------------

# The header up to its value; the value runs to `_AUTH_VALUE_STOP`. Matched apart so that
# the value's end, which may lie past many further "authorization"s of a long line, is
# found once for all of them (`TextView.next_at`).
_AUTH_HEADER = re.compile(
    r"authorization\\{0,3}[\"']?[ \t]*[:=][ \t]*\\{0,3}[\"']?"
    r"(?:(?P<scheme>bearer|basic|token|digest|negotiate|ntlm|apikey|ssws|splunk|"
    r"aws4-hmac-sha256)[ \t]+)?",
    re.IGNORECASE | re.ASCII,
)
_AUTH_VALUE_STOP = re.compile(r"[\s\"'\\,;]", re.ASCII)
_LINE_OR_QUOTE = re.compile(r"[\"'\r\n\\]")
_BEARER = re.compile(r"bearer[ \t]+(?P<value>[A-Za-z0-9._~+/-]+=*)", re.IGNORECASE | re.ASCII)
_MULTI_PART_SCHEMES = ("digest", "aws4-hmac-sha256")


def _authorization_value(view: TextView, pos: int) -> tuple[int, int, str] | None:
    """(start, end, scheme) of the value of an `Authorization` header at `pos`."""
    text = view.text
    match = _AUTH_HEADER.match(text, pos)
    if match is None:
        return None
    start = match.end()
    end = view.next_at(_AUTH_VALUE_STOP, start)
    scheme = (match.group("scheme") or "").lower()
    if end == start:
        if not scheme:
            return None
        # Nothing after the scheme word: the word itself is the value (`Authorization:
        # token`), as a regex backtracking out of the optional scheme would find.
        start = match.start("scheme")
        end = view.next_at(_AUTH_VALUE_STOP, start)
        scheme = ""
    if scheme in _MULTI_PART_SCHEMES:
        end = max(end, view.blank_run_start(view.next_at(_LINE_OR_QUOTE, end)))
    return start, end, scheme


def _authorization(view: TextView) -> list[Edit]:
    text = view.text
    edits: list[tuple[int, int, str]] = []
    for pos in view.find_all("authorization"):
        found = _authorization_value(view, pos)
        if found is not None:
            start, end, scheme = found
            if not is_placeholder_span(view, start, end) and (
                scheme or looks_random_span(text, start, end)
            ):
                replacement = "[MASKED_CREDENTIALS]" if scheme == "basic" else "[MASKED_TOKEN]"
                edits.append((start, end, replacement))
    for pos in view.find_all("bearer"):
        if pos == 0 or not text[pos - 1].isalnum():
            match = _BEARER.match(text, pos)
            if match is not None:
                value = match.group("value")
                if looks_random(value) and not is_placeholder(value):
                    edits.append((match.start("value"), match.end("value"), "[MASKED_TOKEN]"))
    return edits


_PEM_ANCHOR = (Anchor("-----begin"),)

register(
    Detector(
        "private_key",
        SECRETS,
        "[MASKED_PRIVATE_KEY]",
        # A PEM block (service-account JSON included), or the value of a key naming a
        # private key (`PRIVATE_KEY=...`, a path there being no key).
        (*_PEM_ANCHOR, *(key_anchor(k) for k in vocabulary.PRIVATE_KEY.keywords)),
        chain(_pem_detector(private=True), keyvalue_detector(vocabulary.PRIVATE_KEY)),
    ),
    Detector(
        "certificate", SECRETS, "[MASKED_CERTIFICATE]", _PEM_ANCHOR, _pem_detector(private=False)
    ),
    Detector(
        "jwt",
        SECRETS,
        "[MASKED_JWT]",
        (Anchor("eyJ", caseless=False),),
        regex_detector(_JWT, "[MASKED_JWT]"),
    ),
    Detector(
        "github_token",
        SECRETS,
        "[MASKED_GITHUB_TOKEN]",
        tuple(
            Anchor(p, caseless=False)
            for p in ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")
        ),
        regex_detector(_GITHUB, "[MASKED_GITHUB_TOKEN]", word_start=True),
    ),
    Detector(
        "slack_token",
        SECRETS,
        "[MASKED_SLACK_TOKEN]",
        (Anchor("xox", caseless=False), Anchor("xapp-", caseless=False), Anchor("hooks.slack.com")),
        chain(
            regex_detector(_SLACK_TOKEN, "[MASKED_SLACK_TOKEN]", word_start=True),
            regex_detector(_SLACK_WEBHOOK, "[MASKED_SLACK_WEBHOOK]", "path"),
        ),
    ),
    Detector(
        "authorization",
        SECRETS,
        "[MASKED_TOKEN]",
        (
            Anchor("authorization", pattern=rf"authorization{LOOSE_QUOTE}[ \t]*[:=]"),
            Anchor("bearer", pattern=r"bearer[ \t]+[A-Za-z0-9._~+/\-]"),
        ),
        _authorization,
    ),
)
