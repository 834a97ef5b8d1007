"""Credentials that used to reach the prompt (issue 15, item 8): session cookies,
`.netrc` passwords, cloud storage keys and signatures, and a registry's `auth` in a
Docker config whatever it decodes to. Their text forms are cases of the corpora
(tests/masking/corpus/secrets.yaml and benign.yaml, run in every position of a job by
tests/masking/test_masking.py); here the structured forms and the exact rewriting."""

import base64
from collections import Counter
from typing import Any

import orjson
import pytest

from worker.masking.config import MaskingConfig
from worker.masking.masker import Masker
from worker.render.config import WorkerConfig
from worker.render.renderer import Renderer

MASKER = Masker(MaskingConfig(), engine="python")
# Decodes to a bare token: no `user:password` inside, masked all the same in `auths`.
TOKEN_AUTH = base64.b64encode(b"robot-pull-token-Yv3kQ8sZ1mLx").decode()


def mask(text: str) -> tuple[str, dict[str, int]]:
    counts: Counter[str] = Counter()
    return MASKER.mask_text(text, counts), dict(counts)


@pytest.mark.parametrize(
    ("text", "masked", "counts"),
    [
        (
            "Cookie: sid=Q2x9Lm4Vt8Rk; lang=en",
            "Cookie: sid=[MASKED_COOKIE]; lang=[MASKED_COOKIE]",
            {"cookie": 2},
        ),
        (
            "set-cookie: token=Zp8Wq2Lr5Ty9; Max-Age=3600; Domain=example.com; Secure",
            "set-cookie: token=[MASKED_COOKIE]; Max-Age=3600; Domain=example.com; Secure",
            {"cookie": 1},
        ),
        (
            "curl -H 'Cookie: session=Vb7Nm3Kq9Xz2' https://x.example.com",
            "curl -H 'Cookie: session=[MASKED_COOKIE]' https://x.example.com",
            {"cookie": 1},
        ),
        (
            "machine ftp.example.com login ops port 21 password Hj4Kl8Mn2Pq6",
            "machine ftp.example.com login ops port 21 password [MASKED_PASSWORD]",
            {"netrc": 1},
        ),
        (
            "AccountName=acct;AccountKey=Zm9vYmFyYmF6cXV4MTIz==;EndpointSuffix=core.windows.net",
            "AccountName=acct;AccountKey=[MASKED_ACCOUNT_KEY];EndpointSuffix=core.windows.net",
            {"storage_credentials": 1},
        ),
        (
            "GET /b?X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Signature=8d2f0c6a1b7e3d9f4a5c",
            "GET /b?X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Signature=[MASKED_SIGNATURE]",
            {"storage_credentials": 1},
        ),
        (
            f'{{"auths":{{"r.example.com":{{"auth":"{TOKEN_AUTH}"}}}}}}',
            '{"auths":{"r.example.com":{"auth":"[MASKED_CREDENTIALS]"}}}',
            {"docker_auth": 1},
        ),
        (
            '{"auths": {"r.example.com": {"auth": "not base64 at all!"}}}',
            '{"auths": {"r.example.com": {"auth": "[MASKED_CREDENTIALS]"}}}',
            {"docker_auth": 1},
        ),
    ],
)
def test_each_form_is_masked_exactly(text: str, masked: str, counts: dict[str, int]) -> None:
    assert mask(text) == (masked, counts)


def test_an_auth_outside_auths_needs_credentials_inside() -> None:
    """Elsewhere an `auth` key is often a scheme name: only base64 of `user:password`."""
    text = f'{{"auth": "{TOKEN_AUTH}", "mode": {{"auth": "oauth2"}}}}'
    assert mask(text) == (text, {})


LEGACY_ALERT: dict[str, Any] = {
    "alert_type": "ImagePullBackOff",
    "pull_secret": {
        "auths": {
            "ghcr.io": {"auth": TOKEN_AUTH, "email": "ci@example.com"},
            "quay.io": {"username": "bot", "password": "Pz8Lm2Qw6Rt4"},
        }
    },
    "request": {
        "headers": {"Cookie": "sid=Kd9Wq3Lz7Xv1", "Accept": "application/json"},
        "storage": {"accountKey": "Zm9vYmFyYmF6cXV4MTIz=="},
    },
}


def test_structured_values_mask_by_key_and_registry() -> None:
    counts: Counter[str] = Counter()
    masked = MASKER.mask_data(LEGACY_ALERT, counts)
    assert masked["pull_secret"]["auths"] == {
        "ghcr.io": {"auth": "[MASKED_CREDENTIALS]", "email": "ci@example.com"},
        "quay.io": {"username": "bot", "password": "[MASKED_PASSWORD]"},
    }
    assert masked["request"] == {
        "headers": {"Cookie": "[MASKED_COOKIE]", "Accept": "application/json"},
        "storage": {"accountKey": "[MASKED_ACCOUNT_KEY]"},
    }
    assert counts == {"docker_auth": 1, "password": 1, "cookie": 1, "storage_credentials": 1}
    assert LEGACY_ALERT["pull_secret"]["auths"]["ghcr.io"]["auth"] == TOKEN_AUTH  # a copy


def _legacy_job(alert: dict[str, Any]) -> bytes:
    return orjson.dumps(
        {"job_id": "misses", "kind": "legacy_react", "legacy": {"alert_data": alert}}
    )


def test_the_rendered_prompt_and_meta_say_what_was_masked() -> None:
    outcome = Renderer(WorkerConfig()).render(_legacy_job(LEGACY_ALERT))
    assert outcome.status == "ok", outcome.body
    assert outcome.messages is not None
    prompt = "\n".join(m["content"] for m in outcome.messages)
    for secret in (TOKEN_AUTH, "Pz8Lm2Qw6Rt4", "Kd9Wq3Lz7Xv1", "Zm9vYmFyYmF6cXV4MTIz=="):
        assert secret not in prompt
    assert "[MASKED_COOKIE]" in prompt and "ci@example.com" in prompt
    meta = orjson.loads(outcome.body)["meta"]
    assert meta["masked"] == {
        "docker_auth": 1,
        "password": 1,
        "cookie": 1,
        "storage_credentials": 1,
    }


def test_disabling_a_new_detector_lets_its_text_through() -> None:
    masker = Masker(MaskingConfig(disabled=["cookie", "netrc"]), engine="python")
    text = "Cookie: sid=Q2x9Lm4Vt8Rk\nmachine h login u password Hj4Kl8Mn2Pq6"
    assert masker.mask_text(text) == text
