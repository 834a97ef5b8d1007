"""The built-in detectors, in the order they run.

A detector is a name (a `meta.masked` key and a metrics label), the literal anchors of
which at least one occurs in anything it can mask, and a function from text to masked
text. The anchors let the masker skip a detector on every text without one (the common
case: most text holds no secret). Order matters: exact formats (PEM blocks, JWTs,
GitHub tokens) run before the detectors that mask "the value after a key", so
`Authorization: Bearer eyJ...` counts as a JWT and its masked value is left alone.
"""

import base64
import binascii
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from worker.masking import k8s, keyvalue
from worker.masking.linear_regex import LinearPattern
from worker.masking.text import (
    KEY_CHARS,
    MASK_PREFIX,
    TextView,
    drop_overlaps,
    is_placeholder,
    is_placeholder_span,
    looks_random,
    looks_random_span,
    splice,
)

Apply = Callable[[TextView], tuple[str, int]]
Pattern = re.Pattern[str] | LinearPattern


# Whether a pattern matches, decided at the (ascending) start positions of its
# literal's occurrences in a text.
Confirm = Callable[[str, list[int]], bool]


@dataclass(frozen=True, slots=True)
class Split:
    """How an engine that finds literals fast decides an anchor's pattern faster.

    The pattern matches a text iff `quick` matches it (when given: every match of
    `quick` is a match of the pattern) or `confirm` holds at the occurrences of the
    anchor's literal (and then `candidate`, when given, matches too). For patterns
    whose literal is not where a match starts, which Hyperscan cannot lead with:
    `--[key]*token[key]*[ \t]` scanned as a pattern cost as much as all the other
    anchors together.
    """

    quick: str | None
    confirm: Confirm
    # A pattern every match of the confirmed part lies within, scanned instead of the
    # bare literal: prose mentions of a keyword then cost no confirmation.
    candidate: str | None = None


@dataclass(frozen=True, slots=True)
class Anchor:
    """A necessary condition of a detector's matches: `literal` occurs, and when given,
    `pattern` (a regex holding the literal) matches too.

    Ops text mentions "token" and "secret" all the time; a pattern such as "a key
    holding `token` followed by `:` or `=`" lets the prefilter discard those mentions
    in the same pass, so the detector only runs where a match is plausible. Patterns
    use the syntax Python's `re` and Hyperscan share (no look-around, no back-refs),
    and never match a NUL: the prefilter joins a job's texts with NUL separators, and
    a match across two texts would be credited to the wrong one. `split` is the same
    condition in a form that is cheaper for Hyperscan (the Python engine ignores it);
    a property test checks that both say the same.
    """

    literal: str
    caseless: bool = True
    pattern: str | None = None
    split: Split | None = None


_KEY_TAIL = r"[A-Za-z0-9_.\-]*"
_QUOTE = r"(?:\\{0,3}[\"'])?"  # as in keyvalue._SEPARATOR
_LOOSE_QUOTE = r"\\{0,3}[\"']?"  # as in the regexes of the detectors below
# ASCII whitespace, which `\s` is in every engine but RE2 (it leaves out \v).
_SPACE = r" \t\n\r\x0b\x0c"


_KEY_RUN = re.compile(r"[A-Za-z0-9_.\-]+")


def _key_run_end(text: str, start: int) -> int:
    """Where the run of key characters starting at `start` ends."""
    if start >= len(text) or text[start] not in KEY_CHARS:
        return start  # the usual case (a keyword in prose), without a regex call
    match = _KEY_RUN.match(text, start)
    return match.end() if match else start


def _flag_confirm(length: int) -> Confirm:
    """`--[key]*KEYWORD[key]*[ \t]` at an occurrence of a keyword of `length` chars.

    A match holds an occurrence preceded, within the run of key characters that ends
    there, by `--`, and followed by a run of key characters and a blank. Neighbouring
    occurrences share their runs, so no character is walked twice: linear in the text.
    """

    def confirm(text: str, starts: list[int]) -> bool:
        size = len(text)
        # A `--` before the previous checked occurrence was not there: look after it.
        floor = 0
        after_from = after_to = -1  # the key run from `after_from` on ends at `after_to`
        for start in starts:
            end = start + length
            if not after_from <= end <= after_to:
                after_to = _key_run_end(text, end)
            after = after_to
            after_from = end
            if after >= size or text[after] not in " \t":
                continue
            run = start
            while run > floor and text[run - 1] in KEY_CHARS:
                run -= 1
            if text.find("--", run, start) >= 0:
                return True
            floor = start
        return False

    return confirm


@cache  # one Anchor per keyword: detectors sharing it share its prefilter work
def _key_anchor(keyword: str) -> Anchor:
    """Where `keyvalue.find_values` can match: a key holding `keyword` followed by a
    separator, a space (`--token x`), or a Kubernetes env pair's `value` key."""
    k = re.escape(keyword)
    separator = rf"{k}{_KEY_TAIL}{_QUOTE}[ \t]*[:=]"
    flag = rf"--{_KEY_TAIL}{k}{_KEY_TAIL}[ \t]"
    env_value = rf"{k}{_KEY_TAIL}{_QUOTE}[ \t]*,?(?:[{_SPACE}]|\\[nr]){{0,8}}(?:-[ \t]+)?{_LOOSE_QUOTE}value"
    return Anchor(
        keyword,
        pattern=f"{separator}|{flag}|{env_value}",
        # A flag holds the keyword right after a key character (its own dash at least)
        # and before key characters and a blank: "missing secrets" is no candidate.
        split=Split(
            f"{separator}|{env_value}",
            _flag_confirm(len(keyword)),
            candidate=rf"[A-Za-z0-9_.\-]{k}{_KEY_TAIL}[ \t]",
        ),
    )


def _back_over(text: str, i: int, chars: str) -> int:
    """Where the run of `chars` that ends at `i` starts."""
    while i > 0 and text[i - 1] in chars:
        i -= 1
    return i


def _back_over_quote(text: str, i: int) -> int:
    return i - 1 if i > 0 and text[i - 1] in "\"'" else i


def _secret_kind_confirm(text: str, starts: list[int]) -> bool:
    """`kind\\*["']?[ \t]*:[ \t]*\\*["']?` right before an occurrence of `Secret`.

    Read backwards, the parts are disjoint character classes in a fixed order, so
    taking each greedily is exact; no walk passes the previous `Secret`.
    """
    for start in starts:
        i = _back_over(text, _back_over_quote(text, start), "\\")
        i = _back_over(text, i, " \t")
        if i == 0 or text[i - 1] != ":":
            continue
        i = _back_over(text, i - 1, " \t")
        i = _back_over(text, _back_over_quote(text, i), "\\")
        if i >= 4 and text.startswith("kind", i - 4):
            return True
    return False


@dataclass(frozen=True, slots=True)
class Detector:
    name: str
    group: str
    replacement: str  # the main replacement, for documentation and `prompt-worker mask`
    anchors: tuple[Anchor, ...]  # empty: runs on every text
    apply: Apply


def edits_result(view: TextView, edits: list[tuple[int, int, str]]) -> tuple[str, int]:
    text = view.text
    # An edit that changes nothing is no edit (compared without copying the span: the
    # spans of overlapping edits may each run to the end of a long line).
    edits = [e for e in edits if not (e[1] - e[0] == len(e[2]) and text.startswith(e[2], e[0]))]
    if not edits:
        return text, 0
    edits = drop_overlaps(edits)
    return splice(text, edits), len(edits)


def _regex_detector(
    patterns: Pattern | tuple[Pattern, ...],
    replacement: str,
    group: str | int = 0,
    *,
    word_start: bool = False,
) -> Apply:
    """Replace `group` of every match of `patterns`.

    Each pattern starts with a literal, which Python's `re` finds quickly; a leading
    `\\b` or alternation would make it try every position (measured ~20x slower), so
    `word_start` checks the word boundary in code instead. A pattern that could fail
    late after a run its literal repeats in (`eyJ` in a long run of base64url) is a
    `LinearPattern`: `re` would read the run again from each occurrence.
    """
    compiled = patterns if isinstance(patterns, tuple) else (patterns,)

    def apply(view: TextView) -> tuple[str, int]:
        text = view.text
        edits = []
        for pattern in compiled:
            if isinstance(pattern, LinearPattern):
                spans = pattern.spans(text, group)
            else:
                spans = [match.span(group) for match in pattern.finditer(text)]
            for start, end in spans:
                if (
                    word_start
                    and start > 0
                    and (text[start - 1].isalnum() or text[start - 1] == "_")
                ):
                    continue
                if end > start and not text.startswith(MASK_PREFIX, start):
                    edits.append((start, end, replacement))
        return edits_result(view, edits)

    return apply


def _keyvalue_detector(*rules: keyvalue.KeyValueRule) -> Apply:
    def apply(view: TextView) -> tuple[str, int]:
        edits: list[tuple[int, int, str]] = []
        for rule in rules:
            edits.extend(keyvalue.find_values(view, rule))
        return edits_result(view, edits)

    return apply


def _chain(*parts: Apply) -> Apply:
    def apply(view: TextView) -> tuple[str, int]:
        total = 0
        for part in parts:
            text, count = part(view)
            if count:
                total += count
                view = TextView(text)
        return view.text, total

    return apply


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

    def apply(view: TextView) -> tuple[str, int]:
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
        return edits_result(view, edits)

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


# -- kubeconfig -----------------------------------------------------------------------

_KUBECONFIG = re.compile(
    r"(?P<key>certificate-authority-data|client-certificate-data|client-key-data)"
    r"\\{0,3}[\"']?[ \t]*[:=][ \t]*\\{0,3}[\"']?(?P<value>[A-Za-z0-9+/]+=*)"
)


def _kubeconfig(view: TextView) -> tuple[str, int]:
    edits = []
    for match in _KUBECONFIG.finditer(view.text):
        key = match.group("key")
        replacement = "[MASKED_PRIVATE_KEY]" if key == "client-key-data" else "[MASKED_CERTIFICATE]"
        edits.append((match.start("value"), match.end("value"), replacement))
    return edits_result(view, edits)


# -- Docker config `auth` -------------------------------------------------------------

_DOCKER_AUTH = re.compile(
    r"auth\\{0,3}[\"'][ \t]*:[ \t]*\\{0,3}[\"'](?P<value>[A-Za-z0-9+/]{6,}={0,2})(?=\\{0,3}[\"'])"
)


def is_basic_credentials(value: str) -> bool:
    """Docker's `auth` is base64("user:password"); other `auth` values are left alone."""
    try:
        decoded = base64.b64decode(value + "=" * (-len(value) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    return b":" in decoded


def _docker_auth(view: TextView) -> tuple[str, int]:
    text = view.text
    edits = []
    for match in _DOCKER_AUTH.finditer(text):
        if is_basic_credentials(match.group("value")):
            edits.append((match.start("value"), match.end("value"), "[MASKED_CREDENTIALS]"))
    if view.find_all("auths"):
        edits.extend(e for e in _registry_auths(view) if not text.startswith(MASK_PREFIX, e[0]))
    return edits_result(view, edits)


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
_AWS_KEY_ID = (re.compile(r"AKIA[A-Z0-9]{16}\b"), re.compile(r"ASIA[A-Z0-9]{16}\b"))
_OPENSHIFT_TOKEN = re.compile(r"sha256~[A-Za-z0-9_-]{20,}")


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


def _authorization(view: TextView) -> tuple[str, int]:
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
    return edits_result(view, edits)


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


def _cookie(view: TextView) -> tuple[str, int]:
    text = view.text
    edits: list[tuple[int, int, str]] = []
    # A key inside a list already read is one of its cookies, not another header.
    read_to = 0
    for key_start, key_end, key, norm in keyvalue.keys_around(view, "cookie"):
        if key_start < read_to or not keyvalue.owns_cookie(key, norm):
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
    return edits_result(view, edits)


# -- .netrc -----------------------------------------------------------------------------

# `machine HOST login USER [account A] [port P] password SECRET` (or `default login ...`),
# tokens separated by any whitespace, JSON-escaped line breaks included. The sequence
# is required, with at least one field before the password, so prose ("the machine
# learning password is rotated", "default password policy") is no entry.
_NETRC_SPACE = r"(?:[ \t\r\n]|\\[nrt])"
_NETRC_GAP = rf"{_NETRC_SPACE}+"
_NETRC_TOKEN = r"(?:[^ \t\r\n\x00\\]|\\[^nrt\x00])+"
_NETRC_FIELDS = (
    rf"(?:{_NETRC_GAP}(?:login|account|port){_NETRC_GAP}{_NETRC_TOKEN}){{1,3}}"
    rf"{_NETRC_GAP}password{_NETRC_GAP}"
)
_NETRC_MACHINE = rf"machine{_NETRC_GAP}{_NETRC_TOKEN}{_NETRC_FIELDS}"
_NETRC_DEFAULT = rf"default{_NETRC_FIELDS}"
_NETRC_PASSWORD = LinearPattern(rf"(?:{_NETRC_MACHINE}|{_NETRC_DEFAULT})(?P<value>{_NETRC_TOKEN})")


def _netrc(view: TextView) -> tuple[str, int]:
    edits = [
        (start, end, "[MASKED_PASSWORD]")
        for start, end in _NETRC_PASSWORD.spans(view.text, "value")
        if not is_placeholder_span(view, start, end)
    ]
    return edits_result(view, edits)


# -- cloud storage credentials --------------------------------------------------------

# An Azure shared access signature as a connection-string field (the whole token: it
# grants what its `sp` says until its `se`), and the signature parameter of signed
# storage URLs: Azure SAS `sig=`, S3 and GCS presigned `X-Amz-Signature=`,
# `X-Goog-Signature=`. (`AccountKey=` and `SharedAccessKey=` are keys and values,
# `keyvalue.STORAGE_KEY`.)
_SAS_KEY = r"sharedaccesssignature\\{0,3}[\"']?[ \t]*[:=]"
_SAS_TOKEN = LinearPattern(
    rf"{_SAS_KEY}[ \t]*\\{{0,3}}[\"']?(?P<value>[^;{_SPACE}\"'\\<>\x00]+)", ignore_case=True
)
_SIGNATURE_CHAR = rf"[^&#;{_SPACE}\"'\\<>\x00]"
_URL_SIGNATURE = LinearPattern(
    rf"[?&;](?:sig|x-amz-signature|x-goog-signature)=(?P<value>{_SIGNATURE_CHAR}{{16,}})",
    ignore_case=True,
)


def _storage_credentials(view: TextView) -> tuple[str, int]:
    text = view.text
    edits = keyvalue.find_values(view, keyvalue.STORAGE_KEY)
    edits.extend((s, e, "[MASKED_SAS_TOKEN]") for s, e in _SAS_TOKEN.spans(text, "value"))
    edits.extend((s, e, "[MASKED_SIGNATURE]") for s, e in _URL_SIGNATURE.spans(text, "value"))
    edits = [
        edit
        for edit in edits
        if not text.startswith(MASK_PREFIX, edit[0])
        and not is_placeholder_span(view, edit[0], edit[1])
    ]
    return edits_result(view, edits)


# -- container registry credentials ---------------------------------------------------

# Inside the `auths` object of a Docker config, an `auth` value is a credential whatever
# it decodes to (a token, not only `user:password`). The object ends where its braces
# balance (braces in strings are not told apart: registries and credentials hold none,
# and an object read too far only masks more `auth` values).
_AUTHS_OBJECT = re.compile(r"auths\\{0,3}[\"'][ \t]*:[ \t]*\{")
_BRACE = re.compile(r"[{}]")
_REGISTRY_AUTH = re.compile(
    r"(?<=[\"'])auth\\{0,3}[\"'][ \t]*:[ \t]*\\{0,3}[\"'](?P<value>[^\"'\\\n]+)"
)


def _object_end(text: str, start: int) -> int:
    """Where the object whose `{` is at `start` closes (exclusive), or the text's end."""
    depth = 0
    for brace in _BRACE.finditer(text, start):
        depth += 1 if brace.group() == "{" else -1
        if depth == 0:
            return brace.end()
    return len(text)


def _registry_auths(view: TextView) -> list[tuple[int, int, str]]:
    text = view.text
    edits: list[tuple[int, int, str]] = []
    read_to = 0
    for pos in view.find_all("auths"):
        if pos < read_to:
            continue  # inside an `auths` object already read
        match = _AUTHS_OBJECT.match(text, pos)
        if match is None:
            continue
        read_to = _object_end(text, match.end() - 1)
        for auth in _REGISTRY_AUTH.finditer(text, match.end(), read_to):
            edits.append((auth.start("value"), auth.end("value"), "[MASKED_CREDENTIALS]"))
    return edits


# -- credentials in URLs --------------------------------------------------------------

_URL_USERINFO = re.compile(
    r"(?P<user>[^\s/?#@:\"'<>\\\x00]*)(?::(?P<password>[^\s/?#\"'<>\\\x00]+))?@"
    r"(?=[A-Za-z0-9\[])"
)
_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")


def _url_credentials(view: TextView) -> tuple[str, int]:
    text = view.text
    if "@" not in text:
        return text, 0
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
    return edits_result(view, edits)


# -- PII ------------------------------------------------------------------------------

_EMAIL = re.compile(
    r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9][A-Za-z0-9._%+-]{0,63}@"
    r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}[A-Za-z0-9])?)*"
    r"\.[A-Za-z]{2,24}\b"
)


_EMAIL_LOCAL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._%+-")


def _email(view: TextView) -> tuple[str, int]:
    text = view.text
    edits = []
    pos = text.find("@")
    while pos >= 0:
        # An address holding this `@` starts where the run of local-part characters
        # before it does (no such character may precede it), at most 64 back: one
        # match there, not a search through the window before every `@`.
        start = pos
        while start > pos - 65 and start > 0 and text[start - 1] in _EMAIL_LOCAL:
            start -= 1
        match = None
        if start == 0 or text[start - 1] not in _EMAIL_LOCAL:
            match = _EMAIL.match(text, start, min(len(text), pos + 256))
        if match is not None and match.start() <= pos < match.end():
            edits.append((match.start(), match.end(), "[MASKED_EMAIL]"))
            pos = text.find("@", match.end())
        else:
            pos = text.find("@", pos + 1)
    return edits_result(view, edits)


# -- the registry ---------------------------------------------------------------------

SECRETS = "secrets"
PII = "pii"
GROUPS = (SECRETS, PII)
DEFAULT_GROUPS = (SECRETS,)

_PEM_ANCHOR = (Anchor("-----begin"),)


def _k8s_secret(view: TextView) -> tuple[str, int]:
    return k8s.mask(view.text)


BUILTIN: tuple[Detector, ...] = (
    Detector(
        "private_key",
        SECRETS,
        "[MASKED_PRIVATE_KEY]",
        # In text a private key is a PEM block (service-account JSON included); a bare
        # `private_key` value is only recognised in structured data, by its key.
        _PEM_ANCHOR,
        _pem_detector(private=True),
    ),
    Detector(
        "certificate", SECRETS, "[MASKED_CERTIFICATE]", _PEM_ANCHOR, _pem_detector(private=False)
    ),
    Detector(
        "kubeconfig",
        SECRETS,
        "[MASKED_CERTIFICATE]",
        (Anchor("-data", pattern=rf"-data{_LOOSE_QUOTE}[ \t]*[:=]"),),
        _kubeconfig,
    ),
    Detector(
        "kubernetes_secret",
        SECRETS,
        k8s.REPLACEMENT,
        (
            Anchor(
                "Secret",
                caseless=False,
                pattern=r"kind\\*[\"']?[ \t]*:[ \t]*\\*[\"']?Secret",
                split=Split(None, _secret_kind_confirm),
            ),
        ),
        _k8s_secret,
    ),
    Detector(
        "docker_auth",
        SECRETS,
        "[MASKED_CREDENTIALS]",
        (Anchor("auth", caseless=False, pattern=r"auth\\{0,3}[\"'][ \t]*:"),),
        _docker_auth,
    ),
    Detector(
        "jwt",
        SECRETS,
        "[MASKED_JWT]",
        (Anchor("eyJ", caseless=False),),
        _regex_detector(_JWT, "[MASKED_JWT]"),
    ),
    Detector(
        "github_token",
        SECRETS,
        "[MASKED_GITHUB_TOKEN]",
        tuple(
            Anchor(p, caseless=False)
            for p in ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")
        ),
        _regex_detector(_GITHUB, "[MASKED_GITHUB_TOKEN]", word_start=True),
    ),
    Detector(
        "slack_token",
        SECRETS,
        "[MASKED_SLACK_TOKEN]",
        (Anchor("xox", caseless=False), Anchor("xapp-", caseless=False), Anchor("hooks.slack.com")),
        _chain(
            _regex_detector(_SLACK_TOKEN, "[MASKED_SLACK_TOKEN]", word_start=True),
            _regex_detector(_SLACK_WEBHOOK, "[MASKED_SLACK_WEBHOOK]", "path"),
        ),
    ),
    Detector(
        "aws_access_key_id",
        SECRETS,
        "[MASKED_AWS_ACCESS_KEY_ID]",
        (Anchor("AKIA", caseless=False), Anchor("ASIA", caseless=False)),
        _regex_detector(_AWS_KEY_ID, "[MASKED_AWS_ACCESS_KEY_ID]", word_start=True),
    ),
    Detector(
        "aws_secret_access_key",
        SECRETS,
        keyvalue.AWS_SECRET.replacement,
        (_key_anchor("secret"),),
        _keyvalue_detector(keyvalue.AWS_SECRET),
    ),
    Detector(
        "authorization",
        SECRETS,
        "[MASKED_TOKEN]",
        (
            Anchor("authorization", pattern=rf"authorization{_LOOSE_QUOTE}[ \t]*[:=]"),
            Anchor("bearer", pattern=r"bearer[ \t]+[A-Za-z0-9._~+/\-]"),
        ),
        _authorization,
    ),
    Detector(
        "cookie",
        SECRETS,
        "[MASKED_COOKIE]",
        (_key_anchor("cookie"),),
        _cookie,
    ),
    Detector(
        "token",
        SECRETS,
        keyvalue.TOKEN.replacement,
        (_key_anchor("token"), Anchor("sha256~")),
        _chain(
            _regex_detector(_OPENSHIFT_TOKEN, "[MASKED_TOKEN]"), _keyvalue_detector(keyvalue.TOKEN)
        ),
    ),
    Detector(
        "api_key",
        SECRETS,
        keyvalue.API_KEY.replacement,
        tuple(_key_anchor(k) for k in keyvalue.API_KEY.keywords),
        _keyvalue_detector(keyvalue.API_KEY),
    ),
    Detector(
        "storage_credentials",
        SECRETS,
        "[MASKED_ACCOUNT_KEY]",
        (
            *(_key_anchor(k) for k in keyvalue.STORAGE_KEY.keywords),
            Anchor("sharedaccesssignature", pattern=_SAS_KEY),
            # Led by their literals, which Hyperscan finds cheaply (a leading `[?&;]`
            # made it try every `&` of every URL); the detector checks what precedes.
            Anchor("sig=", pattern=rf"sig={_SIGNATURE_CHAR}{{16}}"),
            Anchor(
                "-signature=", pattern=rf"[?&;]x-(?:amz|goog)-signature={_SIGNATURE_CHAR}{{16}}"
            ),
        ),
        _storage_credentials,
    ),
    Detector(
        "netrc",
        SECRETS,
        "[MASKED_PASSWORD]",
        (
            # A password between two gaps, which every entry holds. The entry's whole
            # sequence, or `machine` and a gap, made every job's scan measurably
            # slower (docs/PERFORMANCE.md, "Masking").
            Anchor("password", caseless=False, pattern=rf"{_NETRC_SPACE}password{_NETRC_SPACE}"),
        ),
        _netrc,
    ),
    Detector(
        "password",
        SECRETS,
        keyvalue.PASSWORD.replacement,
        tuple(_key_anchor(k) for k in keyvalue.PASSWORD.keywords),
        _keyvalue_detector(keyvalue.PASSWORD),
    ),
    Detector(
        "secret",
        SECRETS,
        keyvalue.SECRET.replacement,
        (_key_anchor("secret"),),
        _keyvalue_detector(keyvalue.SECRET),
    ),
    Detector(
        "url_credentials",
        SECRETS,
        "[MASKED_PASSWORD]",
        (Anchor("://", pattern=rf"://[^{_SPACE}/?#\"'<>\\\x00]*@"),),
        _url_credentials,
    ),
    Detector("email", PII, "[MASKED_EMAIL]", (Anchor("@"),), _email),
)

BUILTIN_NAMES = frozenset(d.name for d in BUILTIN)
# Keys of `meta.masked` that are not detectors; custom patterns may not take them.
FAILED = "masking_failed"
RESERVED_NAMES = BUILTIN_NAMES | {FAILED}
