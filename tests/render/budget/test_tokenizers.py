"""Tokenizers: the estimate, exact cl100k_base counts, vocabularies checked and offline."""

import hashlib
from pathlib import Path

import pytest
import tiktoken.load

from worker.render.budget import tokenizers, vocabularies

# tiktoken's published SHA-256 of the cl100k_base vocabulary (tiktoken_ext.openai_public).
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"


def test_the_estimate_is_ceil_of_code_points_over_four() -> None:
    estimate = tokenizers.get("estimate")
    assert [estimate.count(t) for t in ("", "a", "abcd", "abcde", "✅✅✅✅✅")] == [0, 1, 1, 2, 2]
    assert estimate.count_many(["abcdefgh", "x"]) == [2, 1]


def test_cl100k_base_is_installed_with_its_published_vocabulary() -> None:
    file = vocabularies.installed()["cl100k_base"]
    assert hashlib.sha256(file.read_bytes()).hexdigest() == CL100K_SHA256
    assert tokenizers.available()[:2] == ["estimate", "cl100k_base"]


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        # Reference encodings of cl100k_base (OpenAI's tokenizer, as published).
        ("hello world", [15339, 1917]),
        ("tiktoken is great!", [83, 1609, 5963, 374, 2294, 0]),
        ("", []),
    ],
)
def test_cl100k_base_encodes_reference_texts_exactly(text: str, ids: list[int]) -> None:
    encoding = vocabularies.load("cl100k_base", vocabularies.installed()["cl100k_base"])
    assert encoding.encode_ordinary(text) == ids
    assert tokenizers.get("cl100k_base").count(text) == len(ids)


def test_special_token_text_counts_as_ordinary_text() -> None:
    cl100k = tokenizers.get("cl100k_base")
    assert cl100k.count("<|endoftext|>") > 1


def test_the_bound_is_never_below_the_count() -> None:
    cl100k = tokenizers.get("cl100k_base")
    for text in ("plain ascii text", "ünïcödé ✅ 漢字 🚀", "   \n\n\t" * 9, "a" * 1000):
        assert cl100k.at_most(text) >= cl100k.at_most(text, tight=True) >= cl100k.count(text)


def test_a_vocabulary_is_read_from_its_package_never_fetched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_download(blobpath: str) -> bytes:
        raise AssertionError(f"tried to fetch {blobpath}")

    monkeypatch.setattr(tiktoken.load, "read_file", no_download)
    monkeypatch.setattr(tiktoken.load, "read_file_cached", no_download)
    encoding = vocabularies.load("cl100k_base", vocabularies.installed()["cl100k_base"])
    assert encoding.name == "cl100k_base"
    assert len(encoding.encode_ordinary("hello world")) == 2


def test_a_vocabulary_whose_hash_is_not_the_published_one_is_refused(tmp_path: Path) -> None:
    original = vocabularies.installed()["cl100k_base"].read_bytes()
    tampered = tmp_path / "cl100k_base.tiktoken"
    tampered.write_bytes(original.replace(b" 0\n", b" 1\n", 1))
    with pytest.raises(vocabularies.VocabularyError, match="is not the published"):
        vocabularies.load("cl100k_base", tampered)


def test_an_unknown_name_lists_what_is_available() -> None:
    with pytest.raises(tokenizers.UnavailableTokenizer) as caught:
        tokenizers.get("gpt-9")
    assert caught.value.available == tokenizers.available()
    assert "estimate, cl100k_base" in str(caught.value)


def test_an_encoding_whose_vocabulary_is_not_one_file_is_refused_not_fetched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_download(blobpath: str) -> bytes:
        raise AssertionError(f"tried to fetch {blobpath}")

    monkeypatch.setattr(tiktoken.load, "read_file", no_download)
    fake = tmp_path / "gpt2.tiktoken"
    fake.write_bytes(b"")
    with pytest.raises(vocabularies.VocabularyError, match="no single installable"):
        vocabularies.load("gpt2", fake)
