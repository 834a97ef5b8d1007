"""Kubernetes and Docker: the values of Secret manifests, kubeconfig's certificate and
key data, and the `auth` credentials of Docker configs.

Secret manifests are read structurally, not by a regex: the same `data:` map is
harmless in a ConfigMap, so a value is masked only when the mapping that holds its
`data` also says `kind: Secret` — before or after it (`kubectl get -o yaml|json` sorts
`data` before `kind`). Handles YAML (also inside a JSON string, where lines are broken
by `\\n`), JSON, JSON escaped inside a JSON string (a tool result), lists of manifests,
and output cut off in the middle.
"""

import base64
import binascii
import json
import re
from dataclasses import dataclass, field
from typing import Any

from worker.masking.detectors.base import (
    LOOSE_QUOTE,
    SECRETS,
    Anchor,
    Detector,
    Edit,
    Split,
    apply_edits,
    register,
)
from worker.masking.text import MASK_PREFIX, TextView, lines

REPLACEMENT = "[MASKED_SECRET_VALUE]"
DATA_KEYS = ("data", "stringData")

_YAML_KIND = re.compile(r"kind:[ \t]*[\"']?Secret[\"']?[ \t]*(?:#.*)?$")
_YAML_KIND_ANYWHERE = re.compile(r"kind:[ \t]*[\"']?Secret\b")
_JSON_KIND = re.compile(r"kind\\*\"[ \t]*:[ \t]*\\*\"Secret\\*\"")
# A key never holds `:`, so it runs to the first colon of its line (less the blanks
# before it). Possessive repeats: nothing is read twice, whatever the line repeats
# (a lazy key followed by `[ \t]*:` read a long run of blanks once per blank).
_YAML_KEY = re.compile(
    r"(?P<indent>[ \t]*+)(?P<item>-[ \t]++)?(?P<key>[^\s:#][^:]*+):(?:[ \t]++|$)"
)
_FLOW_KEY_CHAR = re.compile(r"[^{},:\s]")
_FLOW_KEY_END = re.compile(r"[{},:\s]")
_FLOW_VALUE = re.compile(
    r"(?P<key>[^{},:\s]++)[ \t]*+:[ \t]*+(?P<value>\"[^\"]*\"|'[^']*'|[^,}\s]+)"
)


def secret_manifest_edits(text: str) -> list[Edit]:
    """The edits masking the Secret values of `text`. An edit of a manifest escaped in
    a JSON string rewrites the whole string, holding a mask per value."""
    edits: list[Edit] = []
    if _JSON_KIND.search(text):
        edits.extend(_json_edits(text))
    if _YAML_KIND_ANYWHERE.search(text):
        edits.extend(_yaml_edits(text))
        edits.extend(_flow_edits(text))
    return edits


def mask_secret_manifests(text: str) -> tuple[str, int]:
    """`text` with its Secret values masked, and how many were."""
    applied = apply_edits(text, secret_manifest_edits(text))
    return applied.text, applied.count


def mask_secret_data(data: dict[Any, Any]) -> tuple[dict[Any, Any], int]:
    """The `data` or `stringData` object of a Secret in structured data, its string
    values masked, and how many were (the same object when none was)."""
    result: dict[Any, Any] = {}
    masked = 0
    for key, item in data.items():
        if isinstance(item, str) and item and not item.startswith(MASK_PREFIX):
            masked += 1
            result[key] = REPLACEMENT
        else:
            result[key] = item
    return (result if result != data else data), masked


# -- YAML -------------------------------------------------------------------------


@dataclass(slots=True)
class _Line:
    start: int
    end: int
    indent: int  # column of the key (after a `- ` list marker)
    item: bool  # starts a list item (`- key: value`)
    key: str | None
    value_start: int  # where the value after `key:` starts (== end when none)
    document_break: bool = False


def _parse_lines(text: str) -> list[_Line]:
    """The lines that are not blank: blank lines never end a mapping or a value, and
    leaving them out keeps every walk below proportional to the lines that matter."""
    parsed: list[_Line] = []
    for start, end in lines(text):
        match = _YAML_KEY.match(text, start, end)
        if match is None:
            content = text[start:end]
            stripped = content.lstrip(" \t")
            if not stripped.strip():
                continue
            indent = len(content) - len(stripped)
            if stripped.startswith("- "):
                indent += 2
            parsed.append(
                _Line(
                    start,
                    end,
                    indent,
                    False,
                    None,
                    end,
                    document_break=stripped.rstrip() in ("---", "..."),
                )
            )
            continue
        indent = len(match.group("indent")) + len(match.group("item") or "")
        key = match.group("key").rstrip(" \t")
        parsed.append(_Line(start, end, indent, bool(match.group("item")), key, match.end()))
    return parsed


def _yaml_edits(text: str) -> list[tuple[int, int, str]]:
    parsed = _parse_lines(text)
    edits: list[tuple[int, int, str]] = []
    # By indent: the last mapping looked at. Another `kind: Secret` in it (a repeated
    # key) would find the same values again: mappings are looked at once each.
    seen: dict[int, tuple[int, int]] = {}
    for index, line in enumerate(parsed):
        if line.key != "kind" or not _YAML_KIND.match(text, _kind_pos(text, line), line.end):
            continue
        previous = seen.get(line.indent)
        if previous is not None and previous[0] <= index <= previous[1] and not line.item:
            continue
        first, last = _mapping_bounds(parsed, index)
        seen[line.indent] = (first, last)
        for pos in range(first, last + 1):
            entry = parsed[pos]
            if entry.indent == line.indent and entry.key in DATA_KEYS:
                edits.extend(_data_values(text, parsed, pos, last))
    return edits


def _kind_pos(text: str, line: _Line) -> int:
    return text.index("kind", line.start, line.end)


def _mapping_bounds(parsed: list[_Line], index: int) -> tuple[int, int]:
    """First and last line of the mapping that holds line `index` as a key."""
    col = parsed[index].indent
    first = index
    if not parsed[index].item:
        pos = index - 1
        while pos >= 0:
            line = parsed[pos]
            if line.indent < col or line.document_break:
                break
            if line.indent == col and line.item:
                first = pos
                break
            first = pos
            pos -= 1
    last = index
    pos = index + 1
    while pos < len(parsed):
        line = parsed[pos]
        if line.indent < col or (line.indent == col and line.item) or line.document_break:
            break
        last = pos
        pos += 1
    return first, last


def _data_values(text: str, parsed: list[_Line], pos: int, last: int) -> list[tuple[int, int, str]]:
    head = parsed[pos]
    inline = text[head.value_start : head.end].strip()
    if inline.startswith("{"):
        return _flow_values(text, head.value_start, head.end)
    edits: list[tuple[int, int, str]] = []
    child_indent: int | None = None
    index = pos + 1
    while index <= last:
        line = parsed[index]
        if line.indent <= head.indent:
            break
        if child_indent is None:
            child_indent = line.indent
        if line.indent == child_indent and line.key is not None:
            # The value, plus any deeper continuation lines (block scalars, folded text).
            end = line.end
            follow = index + 1
            while follow <= last and parsed[follow].indent > child_indent:
                end = parsed[follow].end
                follow += 1
            start = line.value_start
            value = text[start:end].strip()
            if value and not value.startswith(MASK_PREFIX):
                edits.append((start, end, REPLACEMENT))
            index = follow
            continue
        index += 1
    return edits


def _flow_values(text: str, start: int, end: int) -> list[tuple[int, int, str]]:
    """The values of a flow mapping (`data: {a: x, b: "y"}`) between `start` and `end`.

    Every start within a run of key characters fails where the run's first one fails
    (the key must reach the run's end to meet its colon), so a failed run is skipped
    whole rather than retried from each of its characters as `finditer` would.
    """
    edits = []
    pos = start
    while pos < end:
        key = _FLOW_KEY_CHAR.search(text, pos, end)
        if key is None:
            break
        match = _FLOW_VALUE.match(text, key.start(), end)
        if match is None:
            run_end = _FLOW_KEY_END.search(text, key.start(), end)
            pos = run_end.start() if run_end else end
            continue
        value = match.group("value")
        if value.startswith(('"', "'")):
            vstart, vend = match.start("value") + 1, match.end("value") - 1
        else:
            vstart, vend = match.start("value"), match.end("value")
        if vend > vstart and not text.startswith(MASK_PREFIX, vstart):
            edits.append((vstart, vend, REPLACEMENT))
        pos = match.end()
    return edits


# -- YAML flow style: `{apiVersion: v1, kind: Secret, data: {conn: x}}` ----------------

_BRACE_OR_BRACKET = re.compile(r"[{}\[\]]")
_FLOW_DATA = re.compile(r"(?<![\w.\-])[\"']?(?:data|stringData)[\"']?[ \t]*:[ \t]*\{")
_FLOW_LOOK_BACK = 4096  # how far before `kind: Secret` its mapping may open


def _flow_edits(text: str) -> list[tuple[int, int, str]]:
    """The values of `data` and `stringData` in a flow mapping that says `kind: Secret`
    (a manifest written on one line, or inside a YAML list's brackets)."""
    edits: list[tuple[int, int, str]] = []
    read_to = 0
    for kind in _YAML_KIND_ANYWHERE.finditer(text):
        if kind.start() < read_to:
            continue  # in a mapping read already
        opening = _opening_brace(text, kind.start())
        if opening < 0:
            continue
        closing = _matching_close(text, opening)
        read_to = closing
        depth = 0
        for match in _BRACE_OR_BRACKET.finditer(text, opening + 1, closing):
            char = match.group()
            if char in "{[":
                depth += 1
            else:
                depth -= 1
            if char == "{" and depth == 1:
                data = _FLOW_DATA.search(text, max(opening, match.start() - 20), match.end())
                if data is not None and data.end() == match.end():
                    edits.extend(
                        _flow_values(text, match.end(), _matching_close(text, match.start()))
                    )
    return edits


def _opening_brace(text: str, pos: int) -> int:
    """The `{` of the flow mapping holding `pos`, looking back a bounded distance."""
    depth = 0
    floor = max(0, pos - _FLOW_LOOK_BACK)
    for match in reversed(list(_BRACE_OR_BRACKET.finditer(text, floor, pos))):
        char = match.group()
        if char in "}]":
            depth += 1
        elif depth:
            depth -= 1
        elif char == "{":
            return match.start()
        else:
            return -1  # inside a sequence, not a mapping
    return -1


def _matching_close(text: str, opening: int) -> int:
    """Where the brace opened at `opening` closes (the text's end if it does not)."""
    depth = 0
    for match in _BRACE_OR_BRACKET.finditer(text, opening):
        depth += 1 if match.group() in "{[" else -1
        if depth == 0:
            return match.start()
    return len(text)


# -- JSON -------------------------------------------------------------------------

# A string, or punctuation. A string not closed on its line matches too (without
# `close`): every later quote of that line is escaped, so no string can start there
# either, and the scan moves on at once rather than reading the rest of the line again
# from each escaped quote; only its punctuation counts (`_PUNCTUATION`), as before.
_JSON_TOKEN = re.compile(
    r'"(?P<s>(?:[^"\\\n]|\\[^\n])*+)(?:(?P<close>")(?P<colon>[ \t\r\n]*+:)?)?|(?P<p>[{}\[\],])'
)
_PUNCTUATION = re.compile(r"[{}\[\],]")


@dataclass(slots=True)
class _Frame:
    is_object: bool
    parent_key: str | None
    key: str | None = None
    kind: str | None = None
    values: list[tuple[int, int]] = field(default_factory=list)  # when a data map
    pending: list[tuple[int, int]] = field(default_factory=list)  # values of its data maps


def _json_edits(text: str) -> list[tuple[int, int, str]]:
    """Lenient scan: strings never span lines in JSON, so prose around the JSON
    (or a stray quote) cannot derail more than its own line."""
    spans: list[tuple[int, int]] = []
    nested: list[tuple[int, int, str]] = []
    stack: list[_Frame] = []

    def punctuation(punct: str) -> None:
        if punct in "{[":
            parent_key = stack[-1].key if stack and stack[-1].is_object else None
            stack.append(_Frame(is_object=punct == "{", parent_key=parent_key))
        elif punct == ",":
            if stack:
                stack[-1].key = None
        elif stack:
            _close(stack, spans)

    for match in _JSON_TOKEN.finditer(text):
        punct = match.group("p")
        if punct is not None:
            punctuation(punct)
            continue
        if match.group("close") is None:
            for inner in _PUNCTUATION.finditer(text, match.start() + 1, match.end()):
                punctuation(inner.group())
            continue
        content_start, content_end = match.span("s")
        if match.group("colon") is not None:
            if stack and stack[-1].is_object:
                stack[-1].key = match.group("s")
            continue
        if not stack:
            continue
        top = stack[-1]
        if top.is_object:
            if top.key == "kind":
                top.kind = match.group("s")
            elif top.parent_key in DATA_KEYS:
                top.values.append((content_start, content_end))
        content = match.group("s")
        if "Secret" in content and "kind" in content:
            replaced = _mask_escaped(content)
            if replaced is not None:
                nested.append((content_start, content_end, replaced))
    while stack:  # output cut off mid-manifest: still mask what belongs to a Secret
        _close(stack, spans)
    edits = [(s, e, REPLACEMENT) for s, e in spans if e > s and not text.startswith(MASK_PREFIX, s)]
    return edits + nested


def _close(stack: list[_Frame], spans: list[tuple[int, int]]) -> None:
    frame = stack.pop()
    if frame.is_object and frame.parent_key in DATA_KEYS and stack:
        stack[-1].pending.extend(frame.values)
    if frame.kind == "Secret":
        spans.extend(frame.pending)


def _mask_escaped(content: str) -> str | None:
    """A manifest escaped inside a JSON string: decode, mask, encode again."""
    try:
        decoded = json.loads(f'"{content}"')
    except ValueError:
        return None
    if not isinstance(decoded, str):
        return None
    masked, count = mask_secret_manifests(decoded)
    if count == 0:
        return None
    return json.dumps(masked, ensure_ascii=False)[1:-1]


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


# -- kubeconfig -----------------------------------------------------------------------

_KUBECONFIG = re.compile(
    r"(?P<key>certificate-authority-data|client-certificate-data|client-key-data)"
    r"\\{0,3}[\"']?[ \t]*[:=][ \t]*\\{0,3}[\"']?(?P<value>[A-Za-z0-9+/]+=*)"
)


def _kubeconfig(view: TextView) -> list[Edit]:
    edits = []
    for match in _KUBECONFIG.finditer(view.text):
        key = match.group("key")
        replacement = "[MASKED_PRIVATE_KEY]" if key == "client-key-data" else "[MASKED_CERTIFICATE]"
        edits.append((match.start("value"), match.end("value"), replacement))
    return edits


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


def _docker_auth(view: TextView) -> list[Edit]:
    text = view.text
    edits = []
    for match in _DOCKER_AUTH.finditer(text):
        if is_basic_credentials(match.group("value")):
            edits.append((match.start("value"), match.end("value"), "[MASKED_CREDENTIALS]"))
    if view.find_all("auths"):
        edits.extend(e for e in _registry_auths(view) if not text.startswith(MASK_PREFIX, e[0]))
    return edits


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


def _secret_manifest(view: TextView) -> list[Edit]:
    return secret_manifest_edits(view.text)


register(
    Detector(
        "kubeconfig",
        SECRETS,
        "[MASKED_CERTIFICATE]",
        (Anchor("-data", pattern=rf"-data{LOOSE_QUOTE}[ \t]*[:=]"),),
        _kubeconfig,
    ),
    Detector(
        "kubernetes_secret",
        SECRETS,
        REPLACEMENT,
        (
            Anchor(
                "Secret",
                caseless=False,
                pattern=r"kind\\*[\"']?[ \t]*:[ \t]*\\*[\"']?Secret",
                split=Split(None, _secret_kind_confirm),
            ),
        ),
        _secret_manifest,
    ),
    Detector(
        "docker_auth",
        SECRETS,
        "[MASKED_CREDENTIALS]",
        (Anchor("auth", caseless=False, pattern=r"auth\\{0,3}[\"'][ \t]*:"),),
        _docker_auth,
    ),
)
