"""`prompt-worker mask`: what an operator tuning the masking configuration sees."""

import io
import json
import sys
from pathlib import Path

import pytest

from tests.cli import prompt_worker
from worker import cli

SAMPLE = (
    "pod payments-api restarted\n"
    "DB_PASSWORD=q7-Wx-91-zz\n"
    "image: quay.io/x/api@sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae\n"
    "curl -H 'Authorization: Bearer 9f8e7d6c5b4a39281706f5e4' https://api.example.com\n"
)


def run(argv: list[str]) -> int:
    return cli.main(["mask", *argv])


@pytest.fixture
def sample(tmp_path: Path) -> Path:
    path = tmp_path / "sample.txt"
    path.write_text(SAMPLE, encoding="utf-8")
    return path


def test_prints_masked_text_and_a_summary(
    sample: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PROMPT_WORKER_CONFIG", raising=False)
    assert run([str(sample)]) == 0
    out, err = capsys.readouterr()
    assert out == SAMPLE.replace("q7-Wx-91-zz", "[MASKED_PASSWORD]").replace(
        "9f8e7d6c5b4a39281706f5e4", "[MASKED_TOKEN]"
    )
    assert err.strip() == (
        "prompt-worker mask: masked 2 value(s) on line(s) 2, 4: authorization=1, password=1"
    )


def test_json_report(sample: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run([str(sample), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["masked"] is True
    assert report["counts"] == {"authorization": 1, "password": 1}
    assert [c["line"] for c in report["changes"]] == [2, 4]
    assert report["changes"][0]["masked"] == "DB_PASSWORD=[MASKED_PASSWORD]"
    assert "q7-Wx-91-zz" not in json.dumps(report)
    assert report["text"].startswith("pod payments-api restarted\nDB_PASSWORD=[MASKED_PASSWORD]\n")


def test_reads_stdin_and_reports_nothing_masked(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    text = "x509: certificate has expired; failed to refresh token\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    assert run(["-"]) == 0
    out, err = capsys.readouterr()
    assert out == text
    assert err.strip() == "prompt-worker mask: nothing masked"


def test_uses_the_configured_patterns_even_when_masking_is_off(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "worker.yaml"
    config.write_text(
        "masking:\n"
        "  enabled: false\n"
        "  disabled: [password]\n"
        "  patterns:\n"
        "    - name: ticket_key\n"
        "      regex: 'TK-[0-9]{6}'\n"
        "      replacement: '[MASKED_TICKET]'\n",
        encoding="utf-8",
    )
    text = tmp_path / "t.txt"
    text.write_text("password: hunter2x\nticket TK-123456 open\n", encoding="utf-8")
    assert run([str(text), "--config", str(config)]) == 0
    out, err = capsys.readouterr()
    assert out == "password: hunter2x\nticket [MASKED_TICKET] open\n"
    assert "masking is disabled in this configuration" in err
    assert "ticket_key=1" in err


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("missing", "cannot read"),
        ("binary", "is not UTF-8 text"),
        ("bad-regex", "masking.patterns.0.regex"),
        ("bad-yaml", "not valid YAML"),
    ],
)
def test_bad_input_or_config_exits_2_without_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], setup: str, message: str
) -> None:
    text = tmp_path / "t.txt"
    text.write_text("hello\n", encoding="utf-8")
    argv = [str(text)]
    if setup == "missing":
        argv = [str(tmp_path / "absent.txt")]
    elif setup == "binary":
        text.write_bytes(b"caf\xe9 \xff\xfe")
    else:
        config = tmp_path / "worker.yaml"
        body = (
            "masking:\n  patterns:\n    - {name: x, regex: '(unclosed'}\n"
            if setup == "bad-regex"
            else "masking: [unclosed\n"
        )
        config.write_text(body, encoding="utf-8")
        argv += ["--config", str(config)]
    assert run(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert message in err
    assert "Traceback" not in err


def test_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run(["--no-such-option"])
    assert exit_info.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_prompt_worker_mask_end_to_end(sample: Path) -> None:
    result = prompt_worker("mask", str(sample))
    assert result.returncode == 0, result.stderr.decode()
    assert b"[MASKED_PASSWORD]" in result.stdout
    assert b"q7-Wx-91-zz" not in result.stdout
