"""Secret masking (issue 7, CONTRACT.md §9), through the full `Renderer.render(body)` path.

Secrets come from tests/masking/corpus/secrets.yaml (synthetic), benign operations text
from benign.yaml; each is put in every outside-world position of a job.
"""

import json
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
import structlog
from structlog.testing import capture_logs

from schemas.job import Job
from tests.data import BENCH_JOBS, CONFORMANCE, REPO, read_jsonl
from tests.masking.corpus.leaks import LEAKS
from tests.masking.corpus.positions import (
    BENIGN_CASES,
    POSITIONS,
    SECRET_CASES,
    Position,
    position_id,
)
from worker.errors import ConfigError
from worker.masking import fields
from worker.masking.config import MaskingConfig
from worker.masking.detectors import BUILTIN, Detector, Edit
from worker.masking.masker import REDACTION_NOTICE, Masker
from worker.masking.paths import walk as _walk
from worker.masking.text import TextView
from worker.render.config import WorkerConfig, load_config, parse_config
from worker.render.renderer import Renderer


def render(renderer: Renderer, job: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """All rendered message text and the reply's meta; fails on an error reply."""
    outcome = renderer.render(orjson.dumps(job))
    assert outcome.status == "ok", outcome.body
    assert outcome.messages is not None
    reply = orjson.loads(outcome.body)
    return "\n".join(m["content"] for m in outcome.messages), reply["meta"]


# -- secrets: gone from every message, in every position -------------------------------


@pytest.mark.parametrize("position", POSITIONS, ids=position_id)
@pytest.mark.parametrize("case", SECRET_CASES, ids=lambda c: c["id"])
def test_secret_never_reaches_a_prompt(
    renderer: Renderer, case: dict[str, Any], position: Position
) -> None:
    text, meta = render(renderer, position.job(case["text"]))
    leaked = [secret for secret in case["secrets"] if secret in text]
    assert not leaked, f"{case['id']} leaked {leaked} through {position_id(position)}"
    assert meta["masked"].get(case["detector"], 0) >= 1, meta["masked"]
    assert "[MASKED_" in text
    if position.verbatim:
        lost = [keep for keep in case["keep"] if keep not in text]
        assert not lost, f"masking removed more than the secret: {lost}"


@pytest.mark.parametrize("position", POSITIONS, ids=position_id)
def test_each_position_really_renders_its_text(
    unmasked_renderer: Renderer, position: Position
) -> None:
    """Without masking the secret is in the prompt: the checks above are not vacuous."""
    case = next(c for c in SECRET_CASES if c["id"] == "password-yaml")
    text, meta = render(unmasked_renderer, position.job(case["text"]))
    assert case["secrets"][0] in text
    assert meta["masked"] == {}


def test_the_corpora_cover_every_detector_and_field() -> None:
    """Every detector masks some case of secrets.yaml (run in every position here) or of
    the leak corpus (tests/masking/test_leaks.py), e-mail aside (tests of its own)."""
    covered = {c["detector"] for c in SECRET_CASES} | {leak.detector for leak in LEAKS}
    assert covered == {d.name for d in BUILTIN} - {"email"}
    assert {c["detector"] for c in SECRET_CASES} <= {d.name for d in BUILTIN}
    assert {p.field for p in POSITIONS} == {path for path, _ in fields.all_paths()}


def _walked_texts(masker: Masker, data: dict[str, Any]) -> list[Any]:
    """The texts of a job by the generic walker alone."""
    texts: list[Any] = []
    runs: list[Any] = []
    for path in masker._text_paths:
        root = data.get(path.steps[0].name)
        if type(root) is dict:
            _walk(root, path, 1, (), texts, runs)
    return texts


BENCH_JOB_FILES = sorted(BENCH_JOBS.glob("*.json")) + sorted(
    (REPO / "bench" / "jobs").glob("*.json")
)
SECRET = "password: hunter2-prod"
# Shapes the models reject, each beside a text where a text belongs.
MALFORMED = [
    {"session": "not an object", "stage": {"previous_stage_context": SECRET}},
    {"stage": {"previous_stage_events": [{"content": 5}, "x", None, {"content": SECRET}]}},
    {
        "chat": {
            "history": [
                None,
                {"messages": "x"},
                {"messages": [{"content": [1]}, 3, {"content": SECRET}]},
            ]
        }
    },
    {
        "stage": {"previous_attempt": [], "previous_stage_context": {"a": 1}},
        "chat": {"user_question": SECRET},
    },
]


@pytest.mark.parametrize(
    "job_data",
    [p.job("some text") for p in POSITIONS]
    + [orjson.loads(path.read_bytes()) for path in BENCH_JOB_FILES]
    + MALFORMED,
)
def test_compiled_text_collectors_walk_like_the_generic_walker(job_data: dict[str, Any]) -> None:
    masker = Masker(MaskingConfig())
    # The collectors keep a placeholder for each malformed item (scanned as no text).
    texts = [t for t in masker.collect_texts(job_data)[0] if type(t) is str]
    assert texts == _walked_texts(masker, job_data)


@pytest.mark.parametrize("job_data", MALFORMED)
def test_malformed_payloads_still_get_their_texts_masked(job_data: dict[str, Any]) -> None:
    counts = Masker(MaskingConfig()).mask_payload(job_data)
    assert counts == {"password": 1}
    assert "hunter2" not in json.dumps(job_data)


# -- benign text: byte-identical ------------------------------------------------------


@pytest.mark.parametrize("position", POSITIONS, ids=position_id)
@pytest.mark.parametrize("case", BENIGN_CASES, ids=lambda c: c["id"])
def test_benign_text_passes_byte_for_byte(
    renderer: Renderer, unmasked_renderer: Renderer, case: dict[str, Any], position: Position
) -> None:
    job = position.job(case["text"])
    masked_text, masked_meta = render(renderer, job)
    plain_text, _ = render(unmasked_renderer, job)
    assert masked_meta["masked"] == {}
    assert masked_text == plain_text
    if position.verbatim:
        assert case["text"] in masked_text


@pytest.mark.parametrize("case", BENIGN_CASES, ids=lambda c: c["id"])
def test_benign_text_is_returned_as_the_same_object(case: dict[str, Any]) -> None:
    masker = Masker(MaskingConfig())
    counts: Counter[str] = Counter()
    assert masker.mask_text(case["text"], counts) is case["text"]
    assert counts == {}


@pytest.mark.parametrize("name", ["typical_react_job.json", "typical_chat_job.json"])
def test_a_job_without_secrets_is_left_untouched(name: str) -> None:
    data = orjson.loads((BENCH_JOBS / name).read_bytes())
    before = json.dumps(data)
    assert Masker(MaskingConfig()).mask_payload(data) == {}
    assert json.dumps(data) == before


def test_only_the_secret_is_replaced_in_place() -> None:
    events = [
        {"event_type": "tool_result", "content": "all good"},
        {"event_type": "tool_result", "content": "DB_PASSWORD=zq81-Kx0-pp2"},
    ]
    session = {"alert_data": "pod crashlooping"}
    data = {
        "job_id": "j",
        "kind": "react",
        "session": session,
        "stage": {"previous_stage_events": events},
    }
    first = events[0]
    counts = Masker(MaskingConfig()).mask_payload(data)
    assert counts == {"password": 1}
    assert data["session"] is session and session == {"alert_data": "pod crashlooping"}
    assert events[0] is first and first["content"] == "all good"
    assert events[1]["content"] == "DB_PASSWORD=[MASKED_PASSWORD]"
    assert Job.model_validate(data).stage.previous_stage_events[1].content == (  # type: ignore[index]
        "DB_PASSWORD=[MASKED_PASSWORD]"
    )


# -- conformance: unaffected ---------------------------------------------------------


@pytest.mark.parametrize("file", ["cases.jsonl", "families.jsonl"])
def test_conformance_renderings_are_unchanged_with_masking_on(file: str) -> None:
    config = load_config(CONFORMANCE / "worker.yaml")
    assert config.masking.enabled
    renderer = Renderer(config)
    assert renderer.masker is not None
    for case in read_jsonl(CONFORMANCE / file):
        outcome = renderer.render(json.dumps(case["job"]).encode())
        assert outcome.status == "ok", outcome.body
        assert outcome.masked == {}, (case["job"]["job_id"], outcome.masked)
        assert outcome.messages == case["expected_messages"], case["job"]["job_id"]


# -- structured data (seed 001 alert data) -------------------------------------------


def test_structured_alert_data_masks_values_and_keeps_keys_and_types() -> None:
    secret_manifest = {
        "apiVersion": "v1",
        "kind": "Secret",
        "data": {"password": "cTk0LXRyMHBpY2Fs", "size": 3},
        "metadata": {"name": "db"},
    }
    alert_data = {
        "alert_type": "DBDown",
        "password": "n0t-for-llm",
        "replicas": 3,
        "enabled": True,
        "ratio": 0.5,
        "missing": None,
        "connection": {"db_password": "zz-top-4", "host": "db", "port": 5432},
        "manifest": secret_manifest,
        "lines": ["ok", "token=ab12cd34ef56gh78"],
        "docker": {"auths": {"r.example.com": {"auth": "dXNlcjpwNHNzdzByZA=="}}},
    }
    job = {"job_id": "j", "kind": "legacy_react", "legacy": {"alert_data": alert_data}}
    keys = list(alert_data)
    counts = Masker(MaskingConfig()).mask_payload(job)
    data = Job.model_validate(job).legacy.alert_data  # type: ignore[union-attr]
    assert data["password"] == "[MASKED_PASSWORD]"
    assert data["connection"] == {"db_password": "[MASKED_PASSWORD]", "host": "db", "port": 5432}
    assert data["manifest"]["data"] == {"password": "[MASKED_SECRET_VALUE]", "size": 3}
    assert data["manifest"]["metadata"] == {"name": "db"}
    assert data["lines"] == ["ok", "token=[MASKED_TOKEN]"]
    assert data["docker"]["auths"]["r.example.com"]["auth"] == "[MASKED_CREDENTIALS]"
    assert (data["replicas"], data["enabled"], data["ratio"], data["missing"]) == (
        3,
        True,
        0.5,
        None,
    )
    assert list(data) == keys
    assert counts == {
        "password": 2,
        "kubernetes_secret": 1,
        "token": 1,
        "docker_auth": 1,
    }


# -- configuration ------------------------------------------------------------------


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "worker.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_bad_custom_regex_is_a_clear_config_error(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        "masking:\n  patterns:\n    - name: ticket\n      regex: 'tkt_[A-Z'\n      replacement: '[MASKED_TICKET]'\n",
    )
    with pytest.raises(ConfigError) as error:
        load_config(path)
    message = str(error.value)
    assert message.startswith(f"{path}: masking.patterns.0.regex: ")
    assert "invalid regular expression" in message


@pytest.mark.parametrize(
    ("masking", "where", "words"),
    [
        ({"groups": ["secrets", "passwords"]}, "masking.groups", "unknown group"),
        ({"disabled": ["pasword"]}, "masking.disabled", "unknown detector"),
        ({"patterns": [{"name": "jwt", "regex": "x+"}]}, "masking.patterns.0.name", "built-in"),
        (
            {"patterns": [{"name": "Bad-Name", "regex": "x+"}]},
            "masking.patterns.0.name",
            "lower-case",
        ),
        ({"patterns": [{"name": "e", "regex": "a*"}]}, "masking.patterns.0.regex", "empty string"),
        (
            {"patterns": [{"name": "m", "regex": r"\[MASKED\]|k\d+", "replacement": "[MASKED]"}]},
            "masking.patterns.0",
            "its own replacement",
        ),
        (
            {"patterns": [{"name": "a", "regex": "x+"}, {"name": "a", "regex": "y+"}]},
            "masking",
            "two custom patterns",
        ),
        ({"enable": True}, "masking.enable", "unknown key"),
        ({"enable": True}, "masking.enable", "did you mean 'enabled'?"),
    ],
)
def test_invalid_masking_config_names_the_field(
    masking: dict[str, Any], where: str, words: str
) -> None:
    with pytest.raises(ConfigError) as error:
        parse_config({"masking": masking}, "w.yaml")
    assert f"w.yaml: {where}: " in str(error.value)
    assert words in str(error.value)


def test_custom_pattern_masks_through_the_renderer() -> None:
    config = parse_config(
        {
            "masking": {
                "patterns": [
                    {
                        "name": "ticket_key",
                        "regex": r"ticket_key=(?P<secret>[A-Z0-9]{12})",
                        "replacement": "[MASKED_TICKET_KEY]",
                        "anchors": ["ticket_key="],
                    },
                    {
                        "name": "internal_host",
                        "regex": r"\bdb-\d+\.corp\b",
                        "replacement": "[HOST]",
                    },
                ]
            }
        }
    )
    job = {
        "job_id": "j",
        "kind": "react",
        "session": {"alert_data": "ticket_key=AB12CD34EF56 on db-7.corp failed"},
    }
    text, meta = render(Renderer(config), job)
    assert "ticket_key=[MASKED_TICKET_KEY] on [HOST] failed" in text
    assert "AB12CD34EF56" not in text
    assert meta["masked"] == {"ticket_key": 1, "internal_host": 1}


def test_disabled_detector_and_pii_group() -> None:
    text = "contact alice.ops@example.com; password: hunter2-prod"
    default = Masker(MaskingConfig())
    assert default.mask_text(text) == "contact alice.ops@example.com; password: [MASKED_PASSWORD]"
    tuned = Masker(MaskingConfig(groups=["secrets", "pii"], disabled=["password"]))
    counts: Counter[str] = Counter()
    assert tuned.mask_text(text, counts) == "contact [MASKED_EMAIL]; password: hunter2-prod"
    assert counts == {"email": 1}


def test_masking_disabled_leaves_secrets_and_builds_no_masker(
    unmasked_renderer: Renderer,
) -> None:
    assert unmasked_renderer.masker is None
    text, meta = render(
        unmasked_renderer,
        {"job_id": "j", "kind": "react", "session": {"alert_data": "password: x9y8z7"}},
    )
    assert "password: x9y8z7" in text
    assert meta["masked"] == {}


# -- fail closed --------------------------------------------------------------------


def _exploding(view: TextView) -> list[Edit]:
    raise RuntimeError(f"detector bug on {view.text!r}")


def test_a_failing_detector_redacts_the_field_and_logs_without_the_text() -> None:
    renderer = Renderer(WorkerConfig())
    masker = renderer.masker
    assert masker is not None
    broken = Detector("broken", "secrets", "[X]", (), _exploding)
    masker.detectors = (*masker.detectors, broken)
    masker._always = (len(masker.detectors) - 1,)
    secret_text = "customer card 4111-1111-1111-1111 password: hunter2-xyz"
    job = {
        "job_id": "j",
        "kind": "react",
        "session": {"alert_data": secret_text, "runbook_content": ""},
        "stage": {"previous_stage_events": [{"event_type": "tool_result", "content": "ok"}]},
    }
    structlog.reset_defaults()
    with capture_logs() as logs:
        outcome = renderer.render(orjson.dumps(job))
    assert outcome.status == "ok", outcome.body
    assert outcome.messages is not None
    rendered = "\n".join(m["content"] for m in outcome.messages)
    assert REDACTION_NOTICE in rendered
    assert "4111-1111" not in rendered and "hunter2" not in rendered
    assert outcome.masked["masking_failed"] == 2  # both fields with text
    failures = [entry for entry in logs if entry["event"] == "masking_failed"]
    assert {entry["field"] for entry in failures} == {
        "session.alert_data",
        "stage.previous_stage_events[0].content",
    }
    assert all(entry["detector"] == "broken" for entry in failures)
    for entry in logs:
        assert "4111" not in repr(entry) and "hunter2" not in repr(entry)


def test_a_failing_detector_redacts_structured_values_too() -> None:
    masker = Masker(MaskingConfig())
    broken = Detector("broken", "secrets", "[X]", (), _exploding)
    masker.detectors = (*masker.detectors, broken)
    masker._always = (len(masker.detectors) - 1,)
    job = {"job_id": "j", "kind": "legacy_react", "legacy": {"alert_data": {"a": "text", "n": 1}}}
    with capture_logs() as logs:
        counts = masker.mask_payload(job)
    assert job["legacy"]["alert_data"] == {"a": REDACTION_NOTICE, "n": 1}  # type: ignore[index]
    assert counts == {"masking_failed": 1}
    assert [e["field"] for e in logs if e["event"] == "masking_failed"] == ["legacy.alert_data.a"]


# -- the field table ----------------------------------------------------------------


def _model_field(model: Any, name: str) -> Any:
    assert name in model.model_fields, f"{model.__name__} has no field {name!r}"
    return model.model_fields[name].annotation


def test_every_field_path_exists_in_the_models() -> None:
    import typing

    from pydantic import BaseModel

    for path, shape in fields.all_paths():
        model: Any = Job
        parts = path.split(".")
        for index, part in enumerate(parts):
            annotation = _model_field(model, part.removesuffix("[]"))
            if index == len(parts) - 1:
                break
            # Unwrap Optional[...] and list[...] down to the next model.
            candidates = [annotation]
            while candidates:
                current = candidates.pop()
                if isinstance(current, type) and issubclass(current, BaseModel):
                    model = current
                    break
                candidates.extend(typing.get_args(current))
            else:
                raise AssertionError(f"{path}: {part} is not a model")
        assert shape in (fields.TEXT, fields.DATA)


def test_every_payload_of_the_job_is_considered() -> None:
    payloads = {
        name
        for name in Job.model_fields
        if name not in ("job_id", "kind", "tools")  # tools are producer metadata
    }
    assert payloads == set(fields.FIELDS)


def test_repository_corpus_files_exist() -> None:
    assert (REPO / "tests" / "masking" / "corpus" / "secrets.yaml").is_file()
    assert (REPO / "tests" / "masking" / "corpus" / "benign.yaml").is_file()


def test_masking_md_names_every_detector() -> None:
    """docs/MASKING.md's tables name every built-in detector (its `meta.masked` key)."""
    text = (REPO / "docs" / "MASKING.md").read_text(encoding="utf-8")
    assert [d.name for d in BUILTIN if f"`{d.name}`" not in text] == []
