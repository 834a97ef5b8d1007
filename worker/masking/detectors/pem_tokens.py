"""PEM blocks and headers: private keys and certificates, and the values of
`Authorization` headers and bearer tokens.

PEM blocks are exact formats, so they run before the key-value detectors; the
`Authorization` header runs after the JWT and vendor detectors: `Authorization: Bearer
eyJ...` counts as a JWT, and its masked value is left alone after.
"""

import base64
import binascii
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
    register,
)
from worker.masking.detectors.keys import keyvalue_detector, rule_anchors
from worker.masking.text import (
    TextView,
    is_placeholder,
    is_placeholder_span,
    looks_random,
    looks_random_span,
    occurrences,
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


# A PEM block encoded once more in base64 (a Secret's `tls.key`, Helm values):
# `LS0tLS1CRUdJTi` is base64 of `-----BEGIN`. Its label is read from the decoded start.
_BASE64_PEM = "LS0tLS1CRUdJTi"
_BASE64_RUN = re.compile(r"[A-Za-z0-9+/]+={0,2}")


def _base64_pem(private: bool) -> Apply:
    replacement = "[MASKED_PRIVATE_KEY]" if private else "[MASKED_CERTIFICATE]"

    def apply(view: TextView) -> list[Edit]:
        text = view.text
        edits: list[Edit] = []
        read_to = 0
        for pos in occurrences(text, _BASE64_PEM):
            if pos < read_to:
                continue  # inside a run read already
            run = _BASE64_RUN.match(text, pos)
            if run is None:
                continue
            read_to = run.end()
            if run.end() - pos < 64:
                continue
            head = text[pos : pos + 80]
            try:
                label = base64.b64decode(head[: len(head) // 4 * 4])
            except (binascii.Error, ValueError):
                continue
            is_private = b"PRIVATE" in label or b"SECRET" in label
            if is_private == private and (private or b"CERTIFICATE" in label):
                edits.append((pos, run.end(), replacement))
        return edits

    return apply


# PuTTY's key files: the lines after `Private-Lines: N` are the key.
_PUTTY_PRIVATE = re.compile(r"Private-Lines:[ \t]*(?P<count>[0-9]{1,3})[ \t]*(?:\r?\n|\\n)")
_PUTTY_LINE = re.compile(r"[A-Za-z0-9+/=]+(?:\r?\n|\\n|$)")


def _putty(view: TextView) -> list[Edit]:
    text = view.text
    edits: list[Edit] = []
    for pos in occurrences(text, "Private-Lines:"):
        header = _PUTTY_PRIVATE.match(text, pos)
        if header is None:
            continue
        end = start = header.end()
        for _ in range(int(header.group("count"))):
            line = _PUTTY_LINE.match(text, end)
            if line is None:
                break
            end = line.end()
        end = _trim_trailing_space(text, start, end)
        if end > start:
            edits.append((start, end, "[MASKED_PRIVATE_KEY]"))
    return edits


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
_MULTI_PART_SCHEMES = ("aws4-hmac-sha256",)
# A Digest header's credential is its `response` (a hash of the password, replayable
# while the nonce lives); the user, realm, nonce and URI stay readable.
_DIGEST_RESPONSE = re.compile(r"response[ \t]*=", re.IGNORECASE)
_DIGEST_VALUE = re.compile(
    r"[ \t]*=[ \t]*(?:\\{0,3}\"(?P<quoted>[^\"\\\n]*)|(?P<bare>[^,\s\"\\]+))"
)


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


def _digest_response(view: TextView, start: int) -> list[Edit]:
    """The `response` of the Digest header whose parameters start at `start`."""
    at = view.next_at(_DIGEST_RESPONSE, start)
    if at >= view.line_end(start):
        return []
    value = _DIGEST_VALUE.match(view.text, at + len("response"))
    if value is None:
        return []
    group = "quoted" if value.group("quoted") is not None else "bare"
    return [(value.start(group), value.end(group), "[MASKED_TOKEN]")]


def _authorization(view: TextView) -> list[Edit]:
    text = view.text
    edits: list[tuple[int, int, str]] = []
    for pos in view.find_all("authorization"):
        found = _authorization_value(view, pos)
        if found is not None:
            start, end, scheme = found
            if scheme == "digest":
                edits.extend(_digest_response(view, start))
                continue
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
        # Also PEM in base64 and PuTTY's key files.
        (
            *_PEM_ANCHOR,
            Anchor(_BASE64_PEM, caseless=False),
            Anchor("Private-Lines:", caseless=False),
            *rule_anchors(vocabulary.PRIVATE_KEY),
        ),
        chain(
            _pem_detector(private=True),
            _base64_pem(private=True),
            _putty,
            keyvalue_detector(vocabulary.PRIVATE_KEY),
        ),
    ),
    Detector(
        "certificate",
        SECRETS,
        "[MASKED_CERTIFICATE]",
        (*_PEM_ANCHOR, Anchor(_BASE64_PEM, caseless=False)),
        chain(_pem_detector(private=False), _base64_pem(private=False)),
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
