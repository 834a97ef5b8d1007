"""Properties of the masking stage on arbitrary and adversarial text (hypothesis)."""

import re
from collections import Counter

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.masking.corpus.positions import BENIGN_CASES, SECRET_CASES
from worker.masking import fields, prefilter
from worker.masking.config import MaskingConfig
from worker.masking.detectors import BUILTIN
from worker.masking.masker import REDACTION_NOTICE, Masker

CONFIG = MaskingConfig(groups=["secrets", "pii"])
MASKER = Masker(CONFIG, engine="python")
# The accelerated engines present here; CI has both (tests/masking/test_engines.py).
FAST_ENGINES = (["hyperscan"] if prefilter.HYPERSCAN_AVAILABLE else []) + (
    ["libhs"] if prefilter.libhs_available() else []
)
ENGINES = ["python", *FAST_ENGINES]
MASKERS = {engine: Masker(CONFIG, engine=engine) for engine in ENGINES}

# Pieces of the syntax the detectors key on, so generated text often comes close to a
# secret (and to the masks themselves) instead of being random noise.
FRAGMENTS = [
    "password",
    "PASSWORD",
    "DB_PASSWORD",
    "token",
    "--token",
    "access_token",
    "secret",
    "client_secret",
    "api_key",
    "X-API-Key",
    "Authorization",
    "Bearer ",
    "Basic ",
    "kind: Secret",
    '"kind": "Secret"',
    "kind: ConfigMap",
    "data:",
    "stringData:",
    '"data": {',
    "  ",
    "- ",
    ": ",
    "=",
    ":",
    '"',
    "'",
    '\\"',
    "\\n",
    "\n",
    "{",
    "}",
    "[",
    "]",
    ",",
    "&",
    "@",
    "://",
    "https://",
    "user:pa55@host",
    "-----BEGIN RSA PRIVATE KEY-----",
    "-----END RSA PRIVATE KEY-----",
    "-----BEGIN CERTIFICATE-----",
    "MIIEpAIBAAKCAQEA",
    "eyJhbGciOiJIUzI1NiJ9",
    ".",
    "ghp_",
    "AKIA",
    "xoxb-",
    "sha256~",
    "sha256:",
    "client-key-data",
    '"auth"',
    "dXNlcjpwYXNz",
    "hunter2",
    "aGVsbG8=",
    "abc123XYZ789def456",
    "[MASKED_TOKEN]",
    "[MASKED_PASSWORD]",
    "[MASKED_",
    "name: ",
    "value: ",
    "$TOKEN",
    "x@example.com",
    "İ",
    "é",
    "\t",
    "|",
    "#",
    "\x00",  # the prefilter's separator between the texts of a job
    # Around the anchors Hyperscan decides in two steps (detectors.Split): flags with
    # a keyword inside (`--db-pass x`) and `kind: Secret` with its quoting.
    "--",
    "-",
    "--db-",
    "pass",
    "Pwd",
    "API-KEY",
    "_",
    "a1",
    " ",
    "kind",
    "Secret",
    "\\",
    '\\"',
    # The forms and words of issue 42: separators, prefixes, names, commands, shapes.
    "：",
    "\t",
    "   ",
    " | ",
    "web_1  | ",
    "[pod/x] ",
    "> ",
    "value: ",
    "- value: x\n  name: DB_PASSWORD",
    '"name": "API_TOKEN"}',
    "<password>",
    "</password>",
    "Passwort",
    "hasło",
    "HASŁO",
    "пароль",
    "ПАРОЛЬ",
    "\u212a",  # KELVIN SIGN, which RE2 folds to k
    "mot de passe",
    "session_id",
    "credentials",
    "Pwd=",
    ";",
    "'",
    "mysql -p",
    "curl -u a:",
    "docker login -p ",
    "pass:",
    "app:x@db",
    "IDENTIFIED BY ",
    "machine h ",
    "db:5432:a:b:",
    "glpat-",
    "sk_live_",
    "AIza",
    "SG.",
    "hf_",
    "eyAi",
    "ewog",
    "LS0tLS1CRUdJTi",
    "4111 1111 1111 1111",
    "AKIAIOSFODNN7ABCDEFG",
]

fragment_text = st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join)
any_text = st.one_of(st.text(max_size=400), fragment_text)
corpus_examples = [c["text"] for c in SECRET_CASES[::4]]


def mask(text: str, masker: Masker = MASKER) -> tuple[str, Counter[str]]:
    counts: Counter[str] = Counter()
    return masker.mask_text(text, counts), counts


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(any_text)
@example("password: [MASKED_PASSWORD]=x")
@example("token=token=abc123def456")
@example(
    '{"kind":"Secret","data":{"a":"b"},"x":"{\\"kind\\":\\"Secret\\",\\"data\\":{\\"c\\":\\"d\\"}}"}'
)
def test_masking_is_idempotent_and_never_raises(text: str) -> None:
    once, counts = mask(text)
    twice, again = mask(once)
    assert twice == once
    assert again == {}, f"second pass masked {dict(again)}"
    assert counts.get("masking_failed", 0) == 0, "a detector raised"
    assert once != REDACTION_NOTICE or text == REDACTION_NOTICE


# The names along the masked paths, so generated payloads reach the collectors.
FIELD_NAMES = sorted(
    {part.removesuffix("[]") for path, _ in fields.all_paths() for part in path.split(".")}
)
KEYS = st.sampled_from(FIELD_NAMES) | st.text(max_size=8)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | any_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=20,
)
PAYLOAD_KEYS = sorted({path.split(".")[0] for path, _ in fields.all_paths()})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(PAYLOAD_KEYS), st.dictionaries(KEYS, JSON)))
def test_masking_any_json_never_raises(data: dict[str, object]) -> None:
    counts = MASKER.mask_payload(data)
    assert counts.get("masking_failed", 0) == 0


# Structured values as legacy alert data holds them: credential-looking keys, Secret
# manifests and texts from the fragments at any depth.
DATA_KEYS = st.sampled_from(
    ["password", "db_password", "auth", "token", "api_key", "kind", "data", "name", "x"]
) | st.text(max_size=8)
DATA = st.recursive(
    st.none() | st.integers() | any_text | st.sampled_from(["Secret", "dXNlcjpwYXNz"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(DATA_KEYS, inner, max_size=4),
    max_leaves=20,
)


@pytest.mark.parametrize("engine", ENGINES)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=DATA)
def test_one_pass_over_structured_values_masks_like_a_pass_per_string(
    engine: str, value: object
) -> None:
    """mask_payload scans all strings of a structured value at once (`hits_of`);
    masking each string with its own scan, by a fresh masker (no key memo), gives the
    same value and counts."""
    masker = MASKERS[engine]
    hits_of = masker.hits_by_id(masker.string_leaves(value))
    batched: Counter[str] = Counter()
    result = masker.mask_data(value, batched, "value", hits_of)
    alone: Counter[str] = Counter()
    assert result == Masker(CONFIG, engine=engine).mask_data(value, alone) and batched == alone


def test_key_memo_is_bounded_and_keeps_answering() -> None:
    masker = Masker(MaskingConfig())
    counts: Counter[str] = Counter()
    for i in range(5000):
        masker.mask_data({f"field_{i}": "plain value"}, counts)
    assert len(masker._key_rules) <= 4096
    masked = masker.mask_data({"db_password": "zq81-Kx0-pp2", "field_1": "x"}, counts)
    assert masked == {"db_password": "[MASKED_PASSWORD]", "field_1": "x"}
    assert counts == {"password": 1}


@pytest.mark.parametrize("text", corpus_examples)
def test_masking_corpus_secrets_is_idempotent(text: str) -> None:
    once, counts = mask(text)
    assert sum(counts.values()) > 0
    assert mask(once) == (once, Counter())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(any_text)
# Masking the PEM block joins "://password" and "@example.com" into a URL with userinfo.
@example("x@example.com://password-----BEGIN RSA PRIVATE KEY-----x@example.com")
def test_the_prefilter_never_hides_a_match(text: str) -> None:
    """The anchors are necessary conditions: running every detector changes nothing more."""
    gated, gated_counts = mask(text)
    ungated_counts: Counter[str] = Counter()
    assert MASKER.mask_text(text, ungated_counts, ungated=True) == gated
    assert ungated_counts == gated_counts


@pytest.mark.parametrize("engine", ENGINES)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(any_text, min_size=1, max_size=6))
def test_prefilter_engines_find_what_plain_python_finds(engine: str, texts: list[str]) -> None:
    """Each engine reports exactly the anchors whose literal occurs and pattern matches."""
    masker = MASKERS[engine]
    found = masker.prefilter.scan(texts)
    # Found only for texts that were given (the loop below checks each of those).
    assert set(found) <= set(range(len(texts)))
    for index, text in enumerate(texts):
        lowered = "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in text)
        expected = set()
        for anchor_id, anchor in enumerate(masker.anchors):
            if anchor.literal not in (lowered if anchor.caseless else text):
                continue
            flags = (re.IGNORECASE if anchor.caseless else 0) | re.ASCII
            if anchor.pattern is None or re.search(anchor.pattern, text, flags):
                expected.add(anchor_id)
        assert set(found.get(index, {})) == expected


SPLIT_ANCHORS = {a.literal: a for d in BUILTIN for a in d.anchors if a.split is not None}
# The syntax of the split anchors' patterns, so that most generated texts come close.
SPLIT_FRAGMENTS = st.sampled_from(
    [
        "--",
        "-",
        "token",
        "TOKEN",
        "pass",
        "pwd",
        "secret",
        "api-key",
        "x",
        "_",
        ".",
        "1",
        " ",
        "\t",
        ":",
        "=",
        ",",
        "\n",
        "\\n",
        "value",
        '"',
        "'",
        "\\",
        "kind",
        "Secret",
        "é",
    ]
)


@settings(max_examples=1500, deadline=None)
@given(st.lists(SPLIT_FRAGMENTS, max_size=14).map("".join))
@example("-token x")  # one dash is not a flag
@example("--db-token\tx")  # a tab ends the flag like a space
@example("--tokenpass x")  # the second keyword's run holds the dashes too
@example('token x --token"x')  # each occurrence has its own run after it
@example('"kind": "Secret"')
@example('kind\\\\": \\"Secret')
@example("kind:Secret kind: Secret")
@example(": Secret kind")  # "kind" must come before the colon, not at the end
def test_split_anchors_decide_like_their_patterns(text: str) -> None:
    """Quick pattern, or candidate pattern and confirmation at the literal's occurrences,
    == the full pattern."""
    for anchor in SPLIT_ANCHORS.values():
        assert anchor.split is not None and anchor.pattern is not None
        flags = (re.IGNORECASE if anchor.caseless else 0) | re.ASCII
        expected = re.search(anchor.pattern, text, flags) is not None
        haystack = text.lower() if anchor.caseless else text
        literal = anchor.literal.lower() if anchor.caseless else anchor.literal
        starts = [i for i in range(len(text)) if haystack.startswith(literal, i)]
        split = anchor.split
        quick = split.quick is not None and re.search(split.quick, text, flags)
        candidate = split.candidate is None or re.search(split.candidate, text, flags)
        decided = bool(starts) and bool(quick or (candidate and split.confirm(text, starts)))
        assert decided == expected, anchor.literal


@pytest.mark.parametrize("engine", FAST_ENGINES)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(any_text)
def test_accelerated_and_python_engines_mask_alike(engine: str, text: str) -> None:
    assert mask(text, MASKERS[engine]) == mask(text)


@pytest.mark.parametrize("case", BENIGN_CASES, ids=lambda c: c["id"])
@pytest.mark.parametrize("engine", ENGINES)
def test_benign_corpus_untouched_by_each_engine(case: dict[str, str], engine: str) -> None:
    masker = Masker(MaskingConfig(), engine=engine)
    assert masker.mask_text(case["text"]) is case["text"]
