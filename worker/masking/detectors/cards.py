"""Payment card numbers: 13 to 19 digits, in one run or in groups split by spaces or
dashes (the same separator throughout), starting like a card scheme's numbers and
passing the Luhn check.

The schemes' ranges keep timestamps (`1717228800000`, milliseconds, start with 1) and
most identifiers out; the Luhn check all but one in ten of the rest.

In the `pii` group, off by default like e-mail addresses: cardholder data rather than a
credential, and the only anchor is a run of digits, which Hyperscan cannot find by a
literal (it made the anchor scan of a typical job several times slower; docs/MASKING.md,
"Performance").
"""

import re

from worker.masking.detectors.base import PII, Anchor, Detector, Edit, register
from worker.masking.text import TextView

REPLACEMENT = "[MASKED_CARD_NUMBER]"

# A run of digits and single separators, not inside a longer word or number.
_CANDIDATE = re.compile(r"(?<![0-9A-Za-z_.\-])[2-6][0-9]{3}(?:[ \-]?[0-9]){9,15}(?![0-9A-Za-z_])")
# Lengths by first digits: Visa, Mastercard (51-55, 2221-2720), American Express, Diners,
# JCB, Discover, UnionPay, Maestro.
_LENGTHS = (
    ("4", (13, 16, 19)),
    ("34", (15,)),
    ("37", (15,)),
    ("36", (14, 15, 16, 17, 18, 19)),
    ("38", (14, 15, 16, 17, 18, 19)),
    ("30", (14, 15, 16, 17, 18, 19)),
    ("35", (16, 17, 18, 19)),
    ("5", (16, 17, 18, 19)),
    ("6", (16, 17, 18, 19)),
    ("22", (16,)),
    ("23", (16,)),
    ("24", (16,)),
    ("25", (16,)),
    ("26", (16,)),
    ("27", (16,)),
)


def luhn(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = ord(char) - 48
        if index % 2:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


def is_card_number(candidate: str) -> bool:
    separators = {c for c in candidate if c in " -"}
    if len(separators) > 1:
        return False
    if separators:
        groups = candidate.split(separators.pop())
        if len(groups) < 3 or any(len(g) < 3 or len(g) > 6 for g in groups):
            return False  # cards are written in groups of four (Amex 4-6-5)
    digits = candidate.replace(" ", "").replace("-", "")
    for prefix, lengths in _LENGTHS:
        if digits.startswith(prefix):
            return len(digits) in lengths and luhn(digits)
    return False


def _cards(view: TextView) -> list[Edit]:
    text = view.text
    return [
        (match.start(), match.end(), REPLACEMENT)
        for match in _CANDIDATE.finditer(text)
        if is_card_number(match.group())
    ]


register(
    Detector(
        "card_number",
        PII,
        REPLACEMENT,
        (
            # No literal is in every card number (the empty one is): the pattern, 13
            # digits with single separators, decides. It leads with a digit class,
            # which Hyperscan decides cheaply on text that is mostly words.
            Anchor("", caseless=False, pattern=r"[2-6][0-9]{3}(?:[ \-]?[0-9]){9}"),
        ),
        _cards,
    ),
)
