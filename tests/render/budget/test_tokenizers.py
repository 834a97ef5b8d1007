"""Tokenizers: the estimate, exact cl100k_base and o200k_base counts, vocabularies
checked and never fetched."""

import functools
import gzip
import hashlib
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import bpe_openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tiktoken_ext import openai_public

from tests.data import BENCH_JOBS, CONFORMANCE, read_jsonl
from worker.render.budget import tokenizers, vocabularies

REPO = Path(__file__).resolve().parents[3]
# tiktoken's published SHA-256 of each vocabulary (tiktoken_ext.openai_public).
PUBLISHED_SHA256 = {
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
}
EXACT = ("cl100k_base", "o200k_base")


def test_the_estimate_is_ceil_of_code_points_over_four() -> None:
    estimate = tokenizers.get("estimate")
    assert [estimate.count(t) for t in ("", "a", "abcd", "abcde", "✅✅✅✅✅")] == [0, 1, 1, 2, 2]
    assert estimate.count_many(["abcdefgh", "x"]) == [2, 1]


@pytest.mark.parametrize("name", EXACT)
def test_each_exact_encoding_is_installed_with_its_published_vocabulary(name: str) -> None:
    file = vocabularies.installed()[name]
    assert hashlib.sha256(file.read()).hexdigest() == PUBLISHED_SHA256[name]
    assert tokenizers.available() == ["estimate", "cl100k_base", "o200k_base"]


@pytest.mark.parametrize("name", EXACT)
def test_each_encoding_is_defined_as_tiktoken_publishes_it(name: str) -> None:
    # The definitions are ours (tiktoken's own constructors would download); they must
    # be the ones in tiktoken's source, read as text.
    source = inspect.getsource(openai_public)
    spec = vocabularies.ENCODINGS[name]
    assert spec.sha256 in source
    for alternative in spec.pat_str.split("|") if name == "o200k_base" else [spec.pat_str]:
        assert alternative in source
    for token, rank in spec.special_tokens.items():
        constant = next(k for k, v in vars(openai_public).items() if v == token)
        assert f"{constant}: {rank}" in source


@pytest.mark.parametrize(
    ("name", "text", "ids"),
    [
        # Reference encodings (OpenAI's tokenizers, as published).
        ("cl100k_base", "hello world", [15339, 1917]),
        ("cl100k_base", "tiktoken is great!", [83, 1609, 5963, 374, 2294, 0]),
        ("cl100k_base", "", []),
        ("o200k_base", "hello world", [24912, 2375]),
        ("o200k_base", "", []),
    ],
)
def test_exact_encodings_encode_reference_texts_exactly(
    name: str, text: str, ids: list[int]
) -> None:
    encoding = vocabularies.load(name, vocabularies.installed()[name])
    assert encoding.encode_ordinary(text) == ids
    assert tokenizers.get(name).count(text) == len(ids)


def corpus() -> list[str]:
    """Every text of the test corpus: the conformance cases' jobs and expected
    messages, and the benchmark jobs."""
    texts: list[str] = []

    def strings(value: object) -> None:
        if isinstance(value, str):
            texts.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                strings(item)
        elif isinstance(value, list):
            for item in value:
                strings(item)

    for path in sorted(CONFORMANCE.glob("*.jsonl")):
        for case in read_jsonl(path):
            strings(case)
    for path in sorted(BENCH_JOBS.glob("*.json")):
        strings(json.loads(path.read_text()))
    return texts


@functools.cache
def independent(name: str) -> bpe_openai.Encoding:
    return bpe_openai.get_encoding(name)


@pytest.mark.parametrize("name", EXACT)
def test_each_encoding_agrees_with_an_independent_implementation_on_the_corpus(
    name: str,
) -> None:
    # bpe-openai's Rust BPE is written apart from tiktoken: agreeing with it on every
    # text of the corpus tests our definition of the encoding, not tiktoken with itself.
    ours = tokenizers.get(name)
    theirs = independent(name)
    texts = corpus()
    assert len(texts) > 1000
    assert sum(len(t) for t in texts) > 500_000
    for text in texts:
        assert ours.count(text) == len(theirs.encode_ordinary(text)), text[:200]


@settings(max_examples=1000, deadline=None)
@given(name=st.sampled_from(EXACT), text=st.text(max_size=300))
def test_each_encoding_agrees_with_an_independent_implementation_on_any_text(
    name: str, text: str
) -> None:
    assert tokenizers.get(name).count(text) == len(independent(name).encode_ordinary(text))


@pytest.mark.parametrize("name", EXACT)
def test_special_token_text_counts_as_ordinary_text(name: str) -> None:
    assert tokenizers.get(name).count("<|endoftext|>") > 1


@pytest.mark.parametrize("name", EXACT)
def test_the_bound_is_never_below_the_count(name: str) -> None:
    exact = tokenizers.get(name)
    for text in ("plain ascii text", "ünïcödé ✅ 漢字 🚀", "   \n\n\t" * 9, "a" * 1000):
        assert exact.at_most(text) >= exact.at_most(text, tight=True) >= exact.count(text)


def run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_vocabulary_is_read_from_its_package_never_fetched(tmp_path: Path) -> None:
    # With an empty tiktoken cache and every request sent to a closed port, a fetch
    # would fail or fill the cache; neither happens.
    cache = tmp_path / "cache"
    cache.mkdir()
    code = (
        "from worker.render.budget import tokenizers\n"
        "print(tokenizers.get('cl100k_base').count('hello world'),"
        " tokenizers.get('o200k_base').count('hello world'))\n"
    )
    closed = "http://127.0.0.1:9"
    done = run_python(
        code,
        TIKTOKEN_CACHE_DIR=str(cache),
        HTTP_PROXY=closed,
        HTTPS_PROXY=closed,
        http_proxy=closed,
        https_proxy=closed,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2", "2"]
    assert list(cache.iterdir()) == []


@pytest.mark.parametrize("name", EXACT)
def test_a_vocabulary_whose_hash_is_not_the_published_one_is_refused(
    tmp_path: Path, name: str
) -> None:
    installed = vocabularies.installed()[name]
    original = installed.read()
    tampered = original.replace(b" 0\n", b" 1\n", 1)
    file = tmp_path / installed.path.name
    file.write_bytes(gzip.compress(tampered) if installed.compressed else tampered)
    with pytest.raises(vocabularies.VocabularyError, match="is not the published"):
        vocabularies.load(name, vocabularies.VocabularyFile(file, installed.compressed))


def test_an_unknown_name_lists_what_is_available() -> None:
    with pytest.raises(tokenizers.UnavailableTokenizer) as caught:
        tokenizers.get("gpt-9")
    assert caught.value.available == tokenizers.available()
    assert "estimate, cl100k_base, o200k_base" in str(caught.value)


def test_an_encoding_without_a_known_vocabulary_is_refused_not_fetched(tmp_path: Path) -> None:
    fake = tmp_path / "gpt2.tiktoken"
    fake.write_bytes(b"")
    with pytest.raises(vocabularies.VocabularyError, match="no installable vocabulary"):
        vocabularies.load("gpt2", vocabularies.VocabularyFile(fake, compressed=False))


# A job naming o200k_base, rendered in a process where some packages cannot be imported
# (as on an install without the `tokenizers` extra, or without one of its packages).
RENDER_WITHOUT = """
import sys
for name in sys.argv[1:]:
    sys.modules[name] = None  # import fails, find_spec finds nothing
import orjson
from worker.render.renderer import Renderer
job = {"job_id": "j", "kind": "executive_summary",
       "executive_summary": {"final_analysis": "the pod ran out of memory"},
       "budget": {"max_prompt_tokens": 1000, "tokenizer": "o200k_base"}}
print(Renderer().render(orjson.dumps(job)).body.decode())
"""


@pytest.mark.parametrize(
    ("blocked", "available"),
    [
        (["tiktoken", "tiktoken_ext", "bpe_openai"], "estimate"),
        (["tiktoken"], "estimate"),
        (["bpe_openai"], "estimate, cl100k_base"),
    ],
)
def test_o200k_base_without_its_packages_is_an_invalid_job_naming_the_available_ones(
    blocked: list[str], available: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", RENDER_WITHOUT, *blocked],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    reply = json.loads(done.stdout)
    assert reply["status"] == "error"
    assert reply["error"]["code"] == "invalid_job"
    [detail] = reply["error"]["details"]
    assert detail["field"] == "budget.tokenizer"
    assert detail["message"].endswith(f"available: {available}")
