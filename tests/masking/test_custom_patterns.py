"""Custom patterns run on RE2 (docs/MASKING.md, "Linear time"): what RE2 cannot run in
linear time is refused at start-up, and what would backtrack in Python's `re` does not."""

from collections import Counter

import pytest

from worker.errors import ConfigError
from worker.masking.config import CustomPattern, MaskingConfig
from worker.masking.masker import Masker
from worker.render.config import parse_config


@pytest.mark.parametrize(
    ("regex", "words"),
    [
        (r"key=(?=\w{12})(?P<secret>\w+)", "invalid perl operator: (?="),
        (r"(?<!no)key=(?P<secret>\w+)", "invalid perl operator: (?<"),
        (r"(['\"])(?P<secret>\w+)\1", "invalid escape sequence: \\1"),
    ],
)
def test_patterns_re2_cannot_run_are_refused_naming_the_field(regex: str, words: str) -> None:
    config = {"masking": {"patterns": [{"name": "k", "regex": regex}]}}
    with pytest.raises(ConfigError) as error:
        parse_config(config, "w.yaml")
    message = str(error.value)
    assert message.startswith("w.yaml: masking.patterns.0.regex: ")
    assert "invalid regular expression (RE2 syntax)" in message
    assert words in message


@pytest.mark.timeout(60)
def test_a_pattern_that_backtracks_in_re_runs_in_one_pass() -> None:
    """`(a|aa)+b` takes Python's `re` time exponential in a run of `a` with no `b`
    (about 2^n tries for n = 60: it would never return); RE2 reads the run once."""
    pattern = CustomPattern(name="runs", regex=r"x(?P<secret>(a|aa)+)b", anchors=["x"])
    masker = Masker(MaskingConfig(patterns=[pattern]), engine="python")
    counts: Counter[str] = Counter()
    text = "x" + "a" * 60 + "c xaab"
    assert masker.mask_text(text, counts) == "x" + "a" * 60 + "c x[MASKED]b"
    assert counts == {"runs": 1}


def test_ignore_case_folds_like_the_anchors() -> None:
    """Case is ignored for ASCII letters as the prefilter's engines ignore it: the
    KELVIN SIGN is no `k` (an anchor `key` would not have let the text through)."""
    pattern = CustomPattern(name="k", regex=r"key=(?P<secret>\w+)", ignore_case=True)
    masker = Masker(MaskingConfig(patterns=[pattern]), engine="python")
    assert masker.mask_text("KEY=abc \u212aey=def") == "KEY=[MASKED] \u212aey=def"


def test_text_with_a_lone_surrogate_is_scanned_in_place() -> None:
    """JSON may carry a lone surrogate (`"\\ud800"`), which UTF-8 cannot: RE2 reads it
    as U+FFFD, one character for one, so every position after it is right."""
    pattern = CustomPattern(name="k", regex=r"key=(?P<secret>\w+)")
    masker = Masker(MaskingConfig(patterns=[pattern]), engine="python")
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl"
    text = f"\ud800 key=abc \ud800 {jwt} done"
    assert masker.mask_text(text) == "\ud800 key=[MASKED] \ud800 [MASKED_JWT] done"
