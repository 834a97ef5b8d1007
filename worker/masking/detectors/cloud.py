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
    regex_detector,
    register,
)
from worker.masking.detectors.keys import key_anchor, keyvalue_detector
from worker.masking.linear_regex import LinearPattern
from worker.masking.text import MASK_PREFIX, TextView, is_placeholder_span

_AWS_KEY_ID = (re.compile(r"AKIA[A-Z0-9]{16}\b"), re.compile(r"ASIA[A-Z0-9]{16}\b"))


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
        "aws_access_key_id",
        SECRETS,
        "[MASKED_AWS_ACCESS_KEY_ID]",
        (Anchor("AKIA", caseless=False), Anchor("ASIA", caseless=False)),
        regex_detector(_AWS_KEY_ID, "[MASKED_AWS_ACCESS_KEY_ID]", word_start=True),
    ),
    Detector(
        "aws_secret_access_key",
        SECRETS,
        vocabulary.AWS_SECRET.replacement,
        tuple(key_anchor(k) for k in vocabulary.AWS_SECRET.keywords),
        keyvalue_detector(vocabulary.AWS_SECRET),
    ),
    Detector(
        "storage_credentials",
        SECRETS,
        "[MASKED_ACCOUNT_KEY]",
        (
            *(key_anchor(k) for k in vocabulary.STORAGE_KEY.keywords),
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
