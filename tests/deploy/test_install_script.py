"""scripts/install-runtime.sh — the install steps the Dockerfile's build stage runs.

Running it here into a fresh venv is how CI proves the image's install works without a
Docker engine: the wheel builds from the files the Dockerfile copies, and the installed
command starts with runtime dependencies only.
"""

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "install-runtime.sh"


# Builds a wheel and installs the runtime dependencies from the index: 20-45 s here.
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_script_installs_a_working_prompt_worker_into_a_fresh_venv(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    result = subprocess.run(
        ["bash", str(SCRIPT), str(venv), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=570,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr

    version = subprocess.run(
        [str(venv / "bin" / "prompt-worker"), "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert version.stdout.startswith("prompt-worker ")
    assert "unknown" not in version.stdout  # the version comes from installed metadata

    installed = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "list", "--format=freeze"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.lower()
    assert "build-prompt-worker==" in installed
    # Test and lint tools must never reach the runtime image.
    for dev_only in ("pytest", "mypy", "ruff", "hypothesis", "kubernetes-validate"):
        assert f"{dev_only}==" not in installed, dev_only

    # Exact budgets work in the image: the `tokenizers` extra and its vocabularies.
    available = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "from worker.render.budget import tokenizers; "
            "print(tokenizers.available(), tokenizers.get('cl100k_base').count('hello world'),"
            " tokenizers.get('o200k_base').count('hello world'))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert available.strip() == "['estimate', 'cl100k_base', 'o200k_base'] 2 2"

    # Tracing works in the image: the `otel` extra, its exporters found as the SDK finds them.
    exporters = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "from worker.ops.otel import exporter_names, make_exporter, LostSpans; "
            "print(*(type(make_exporter(name, LostSpans(None))).__module__ for name in "
            "exporter_names({'OTEL_TRACES_EXPORTER': 'otlp_proto_grpc,otlp_proto_http,console'})))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert exporters.split() == [
        "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
        "opentelemetry.exporter.otlp.proto.http.trace_exporter",
        "opentelemetry.sdk.trace.export",
    ]


def test_script_refuses_wrong_usage() -> None:
    result = subprocess.run(
        ["bash", str(SCRIPT)], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 2
    assert "usage" in result.stderr
