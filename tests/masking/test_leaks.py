"""The leak corpus (tests/masking/corpus/leaks.py): every secret masked whole, by every
engine, counted in `meta.masked` under its detector, and gone from the rendered prompt."""

from collections import Counter
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.masking.corpus.leaks import LEAKS, Leak
from worker.masking import prefilter
from worker.masking.config import MaskingConfig
from worker.masking.detectors import BUILTIN
from worker.masking.masker import Masker
from worker.render.config import WorkerConfig
from worker.render.renderer import Renderer

ENGINES = [
    "python",
    *(["hyperscan"] if prefilter.HYPERSCAN_AVAILABLE else []),
    *(["libhs"] if prefilter.libhs_available() else []),
]
MASKERS = {
    (engine, groups): Masker(MaskingConfig(groups=list(groups)), engine=engine)
    for engine in ENGINES
    for groups in {leak.groups for leak in LEAKS}
}
# Text every mask is made of: four characters of a secret found in it are no leak.
MARKERS = " ".join(d.replacement for d in BUILTIN) + " [MASKED_"


def windows(secret: str) -> set[str]:
    """The runs of four characters of `secret` (not across its line breaks)."""
    return {line[i : i + 4] for line in secret.split("\n") for i in range(max(0, len(line) - 3))}


def leaked(leak: Leak, secret: str, masked: str, around: str = "") -> set[str]:
    """What of `secret` survives in `masked` and is not also text around it or a mask."""
    background = (around or leak.render("")) + MARKERS
    return {w for w in windows(secret) if w in masked and w not in background}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("leak", LEAKS, ids=lambda leak: leak.id)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_secret_is_masked_whole(leak: Leak, engine: str, data: st.DataObject) -> None:
    secret = data.draw(leak.secret, label="secret")
    text = leak.render(secret)
    counts: Counter[str] = Counter()
    masked = MASKERS[engine, leak.groups].mask_text(text, counts)
    assert not leaked(leak, secret, masked), masked
    assert counts[leak.detector] >= 1, dict(counts)
    again: Counter[str] = Counter()
    assert MASKERS[engine, leak.groups].mask_text(masked, again) == masked and not again


@pytest.mark.parametrize("leak", LEAKS, ids=lambda leak: leak.id)
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_rendered_prompt_holds_no_piece_of_it(leak: Leak, data: st.DataObject) -> None:
    """Through `Renderer.render(body)`, in a tool result: the reply's `meta.masked`
    counts it under its detector."""
    secret = data.draw(leak.secret, label="secret")
    renderer = Renderer(WorkerConfig(masking=MaskingConfig(groups=list(leak.groups))))
    prompt, meta = _render(renderer, leak.render(secret))
    empty, _ = _render(renderer, leak.render(""))  # the prompt's own text
    assert not leaked(leak, secret, prompt, empty)
    assert meta["masked"].get(leak.detector, 0) >= 1


def _render(renderer: Renderer, text: str) -> tuple[str, dict[str, Any]]:
    job = {
        "job_id": "leak",
        "kind": "react",
        "stage": {"previous_stage_events": [{"event_type": "tool_result", "content": text}]},
    }
    outcome = renderer.render(orjson.dumps(job))
    assert outcome.status == "ok", outcome.body
    assert outcome.messages is not None
    meta: dict[str, Any] = orjson.loads(outcome.body)["meta"]
    return "\n".join(m["content"] for m in outcome.messages), meta


def test_the_corpus_has_a_case_per_row_and_vendor_family() -> None:
    rows = {leak.row for leak in LEAKS}
    issue_rows = {
        "punctuation",
        "line prefixes",
        "keys anywhere",
        "yaml blocks",
        "key names",
        "java properties and env",
        "command lines",
        "urls and connection strings",
        "tokens in pieces",
    }
    required_vendors = {
        "GitLab",
        "Stripe",
        "OpenAI",
        "Anthropic",
        "Google API keys",
        "Google OAuth",
        "npm",
        "PyPI",
        "SendGrid",
        "Hugging Face",
        "HashiCorp Vault",
        "Telegram bot tokens",
        "Discord webhooks",
        "Azure AD client secrets",
        "Twilio API keys",
        "Datadog",
        "Shopify",
    }
    assert issue_rows | required_vendors <= rows
    assert len({leak.id for leak in LEAKS}) == len(LEAKS)
