"""Personal data, in the `pii` group (off unless configured): e-mail addresses."""

import re

from worker.masking.detectors.base import PII, Anchor, Detector, Edit, register
from worker.masking.text import TextView

# -- PII ------------------------------------------------------------------------------

_EMAIL = re.compile(
    r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9][A-Za-z0-9._%+-]{0,63}@"
    r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}[A-Za-z0-9])?)*"
    r"\.[A-Za-z]{2,24}\b"
)


_EMAIL_LOCAL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._%+-")


def _email(view: TextView) -> list[Edit]:
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
    return edits


register(
    Detector("email", PII, "[MASKED_EMAIL]", (Anchor("@"),), _email),
)
