"""Cloud keys: AWS access key ids and secret keys, Azure storage account keys and
shared access signatures, and the signatures of S3, GCS and Azure presigned URLs."""

import re

from worker.masking.detectors import keys, vocabulary
from worker.masking.detectors.base import (
    SECRETS,
    SPACE,
    Anchor,
    Detector,
    Edit,
    chain,
    regex_detector,
    register,
)
from worker.masking.detectors.keys import keyvalue_detector, rule_anchors
from worker.masking.linear_regex import LinearPattern
from worker.masking.text import MASK_PREFIX, TextView, is_placeholder_span

_AWS_KEY_ID = (re.compile(r"AKIA[A-Z0-9]{16}\b"), re.compile(r"ASIA[A-Z0-9]{16}\b"))

# -- AWS secret access keys by context ------------------------------------------------

# A secret key is 40 characters of base64 with nothing to tell it from other base64 but
# where it stands: after its key's name (`keys`), after `aws configure`'s prompt, or
# beside its key id (`AKIA... wJalr...`, a row of the console's CSV export).
AWS_SECRET = "[MASKED_AWS_SECRET_ACCESS_KEY]"
_SECRET_SHAPE = re.compile(r"[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")
_BESIDE = r"[ \t,;:|=\"'\\]+"
_NEXT_TO_ID = re.compile(
    rf"(?:{_BESIDE}[^\s,;:|=\"'\\]{{1,64}}){{0,2}}?{_BESIDE}(?=[A-Za-z0-9/+]{{40}})"
)
_CONFIGURE_PROMPT = re.compile(
    r"secret[ _-]?access[ _-]?key[ \t]*(?:\[[^\]\r\n]{0,64}\])?[ \t]*:[ \t]*", re.IGNORECASE
)


def _random_base64(text: str, start: int) -> bool:
    value = text[start : start + 40]
    return any(c.isupper() for c in value) and any(c.islower() for c in value)


def _aws_secret_in_context(view: TextView) -> list[Edit]:
    text = view.text
    starts: list[int] = []
    for literal in ("AKIA", "ASIA"):
        for pos in view.find_all(literal.lower()):
            if text.startswith(literal, pos):
                beside = _NEXT_TO_ID.match(text, pos + 20)
                if beside is not None:
                    starts.append(beside.end())
    for pos in view.find_all("secret"):
        prompt = _CONFIGURE_PROMPT.match(text, pos)
        if prompt is not None:
            starts.append(prompt.end())
    return [
        (start, start + 40, AWS_SECRET)
        for start in starts
        if _SECRET_SHAPE.match(text, start) and _random_base64(text, start)
    ]


# -- cloud storage credentials --------------------------------------------------------

# An Azure shared access signature as a connection-string field (the whole token: it
# grants what its `sp` says until its `se`), and the signature parameter of signed
# storage URLs: Azure SAS `sig=`, S3 and GCS presigned `X-Amz-Signature=`,
# `X-Goog-Signature=`. (`AccountKey=` and `SharedAccessKey=` are keys and values,
# `keys.STORAGE_KEY`.)
_SAS_KEY = r"sharedaccesssignature\\{0,3}[\"']?[ \t]*[:=]"
_SAS_TOKEN = LinearPattern(
    rf"{_SAS_KEY}[ \t]*\\{{0,3}}[\"']?(?P<value>[^;{SPACE}\"'\\<>\x00]+)", ignore_case=True
)
_SIGNATURE_CHAR = rf"[^&#;{SPACE}\"'\\<>\x00]"
_URL_SIGNATURE = LinearPattern(
    rf"[?&;](?:sig|x-amz-signature|x-goog-signature)=(?P<value>{_SIGNATURE_CHAR}{{16,}})",
    ignore_case=True,
)


def _storage_credentials(view: TextView) -> list[Edit]:
    text = view.text
    edits = keys.find_values(view, vocabulary.STORAGE_KEY)
    edits.extend((s, e, "[MASKED_SAS_TOKEN]") for s, e in _SAS_TOKEN.spans(text, "value"))
    edits.extend((s, e, "[MASKED_SIGNATURE]") for s, e in _URL_SIGNATURE.spans(text, "value"))
    edits = [
        edit
        for edit in edits
        if not text.startswith(MASK_PREFIX, edit[0])
        and not is_placeholder_span(view, edit[0], edit[1])
    ]
    return edits


register(
    Detector(
        "aws_secret_access_key",
        SECRETS,
        AWS_SECRET,
        (
            *rule_anchors(vocabulary.AWS_SECRET),
            Anchor("AKIA", caseless=False),
            Anchor("ASIA", caseless=False),
        ),
        chain(keyvalue_detector(vocabulary.AWS_SECRET), _aws_secret_in_context),
    ),
    Detector(
        "aws_access_key_id",
        SECRETS,
        "[MASKED_AWS_ACCESS_KEY_ID]",
        (Anchor("AKIA", caseless=False), Anchor("ASIA", caseless=False)),
        regex_detector(_AWS_KEY_ID, "[MASKED_AWS_ACCESS_KEY_ID]", word_start=True),
    ),
    Detector(
        "storage_credentials",
        SECRETS,
        "[MASKED_ACCOUNT_KEY]",
        (
            *rule_anchors(vocabulary.STORAGE_KEY),
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
)
