"""scripts/serve is cheap to run again (issue 16): scripts/ensure-venv installs only when
something changed, and the local broker is managed only for a URL naming this machine.

The scripts run for real in a copy of the layout they expect, with stand-ins for pip, uv,
the broker installer and the worker that record being called.
"""

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from tests.data import REPO
from tests.readme import render_example_config

SCRIPTS = REPO / "scripts"
RECORDER = """#!/usr/bin/env bash
echo "{name} $*" >> "$CALLS"
"""
# Answers the version question ensure-venv asks; records every other call (pip). A pip
# install of uv puts a recording uv beside it, as the real one would install uv there.
FAKE_PYTHON = """#!/usr/bin/env bash
if [ "$1" = "-c" ]; then echo "3.11.7 (fake) /fake/python"; exit 0; fi
echo "python $*" >> "$CALLS"
case "$*" in
    *"pip install"*" uv=="*) printf '#!/usr/bin/env bash\\necho "uv $*" >> "$CALLS"\\n' > "$(dirname "$0")/uv"
        chmod +x "$(dirname "$0")/uv" ;;
esac
"""


def is_local(*argv: str, env: dict[str, str] | None = None) -> int:
    return subprocess.run(
        [str(SCRIPTS / "is-local-broker"), *argv],
        env={**os.environ, **(env or {})},
        capture_output=True,
        timeout=60,
        check=False,
    ).returncode


@pytest.mark.parametrize(
    "url",
    [
        "amqp://guest:guest@127.0.0.1:5672/",
        "amqp://localhost",
        "amqps://user:pw@[::1]:5671/vhost",
        f"amqp://{socket.gethostname()}/",
    ],
)
def test_urls_naming_this_machine_are_local(url: str) -> None:
    assert is_local(url) == 0


@pytest.mark.parametrize("url", ["amqp://192.0.2.10:5672/", "amqps://no-such-host.invalid/"])
def test_urls_naming_other_machines_are_not(url: str) -> None:
    assert is_local(url) == 1


def test_not_an_amqp_url_is_a_usage_error() -> None:
    assert is_local("http://127.0.0.1/") == 2
    assert is_local("amqp://127.0.0.1/,http://127.0.0.1/") == 2


def test_the_usage_error_never_shows_the_url() -> None:
    result = subprocess.run(
        [str(SCRIPTS / "is-local-broker"), "amqp://127.0.0.1/,http://u:s3cret@h/"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "address 2" in result.stderr
    assert "s3cret" not in result.stderr


def test_a_cluster_is_local_only_when_every_node_is() -> None:
    assert is_local("amqp://127.0.0.1:5681/,amqp://localhost:5682/") == 0
    assert is_local("amqp://127.0.0.1:5681/,amqp://192.0.2.10:5672/") == 1
    assert is_local("amqp://192.0.2.10:5672/,amqp://127.0.0.1:5681/") == 1


def test_url_from_the_environment_else_the_default() -> None:
    assert is_local(env={"PROMPT_WORKER_AMQP_URL": "amqp://192.0.2.10/"}) == 1
    assert is_local(env={"PROMPT_WORKER_AMQP_URL": ""}) == 0  # the default: 127.0.0.1


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A checkout's layout: the real serve, ensure-venv and is-local-broker; stand-ins
    for the installers, pip (the venv's python) and the worker."""
    root = tmp_path / "repo"
    for name in ("serve", "ensure-venv", "is-local-broker"):
        write(root / "scripts" / name, (SCRIPTS / name).read_text())
    for name in ("ensure-rabbitmq", "ensure-libhs"):
        write(root / "scripts" / name, RECORDER.format(name=name))
    write(root / ".venv" / "bin" / "python", FAKE_PYTHON)
    write(root / ".venv" / "bin" / "uv", RECORDER.format(name="uv"))
    write(root / ".venv" / "bin" / "prompt-worker", RECORDER.format(name="prompt-worker"))
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    shutil.copy(REPO / "uv.lock", root / "uv.lock")
    return root


def run(tree: Path, script: str, *argv: str, env: dict[str, str] | None = None) -> list[str]:
    calls = tree / "calls.txt"
    calls.write_text("")
    environment = {k: v for k, v in os.environ.items() if k != "PROMPT_WORKER_AMQP_URL"}
    environment.update(CALLS=str(calls), **(env or {}))
    result = subprocess.run(
        [str(tree / "scripts" / script), *argv],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return calls.read_text().splitlines()


def installs(calls: list[str]) -> int:
    """The installs of the lock: `uv sync`, frozen (never a fresh resolution)."""
    syncs = [call for call in calls if call.startswith("uv sync ")]
    assert all("--frozen" in call and "--extra test" in call for call in syncs), syncs
    return len(syncs)


def test_ensure_venv_installs_once_then_only_after_a_change(tree: Path) -> None:
    assert installs(run(tree, "ensure-venv")) == 1
    assert run(tree, "ensure-venv") == []
    with (tree / "pyproject.toml").open("a") as handle:
        handle.write("\n# a new dependency, say\n")
    assert installs(run(tree, "ensure-venv")) == 1
    assert run(tree, "ensure-venv") == []
    assert installs(run(tree, "ensure-venv", "--force")) == 1


def test_ensure_venv_installs_again_when_the_lock_changes(tree: Path) -> None:
    run(tree, "ensure-venv")
    with (tree / "uv.lock").open("a") as handle:
        handle.write("\n# a moved pin, say\n")
    assert installs(run(tree, "ensure-venv")) == 1
    assert run(tree, "ensure-venv") == []


def test_ensure_venv_installs_again_when_the_command_is_missing(tree: Path) -> None:
    run(tree, "ensure-venv")
    (tree / ".venv" / "bin" / "prompt-worker").unlink()
    assert installs(run(tree, "ensure-venv")) == 1


def test_ensure_venv_gets_the_locked_uv_from_pypi_when_it_has_none(tree: Path) -> None:
    (tree / ".venv" / "bin" / "uv").unlink()
    calls = run(tree, "ensure-venv")
    pip = [call for call in calls if "-m pip install" in call]
    # The version uv.lock pins, read here from the lock's text, not by the script.
    lock = (tree / "uv.lock").read_text()
    version = lock.split('\nname = "uv"\nversion = "', 1)[1].split('"', 1)[0]
    assert len(pip) == 1
    assert pip[0].endswith(f" uv=={version}")
    assert installs(calls) == 1


def test_serve_manages_the_broker_for_a_local_url_only(tree: Path) -> None:
    run(tree, "ensure-venv")
    calls = run(tree, "serve", "--prefetch", "8")
    assert calls == ["ensure-rabbitmq ", "ensure-libhs ", "prompt-worker serve --prefetch 8"]
    remote = "amqp://guest:guest@192.0.2.10:5672/"
    for argv in (["--amqp-url", remote], [f"--amqp-url={remote}"]):
        assert run(tree, "serve", *argv) == [
            "ensure-libhs ",
            f"prompt-worker serve {' '.join(argv)}",
        ]
    calls = run(tree, "serve", env={"PROMPT_WORKER_AMQP_URL": remote})
    assert calls == ["ensure-libhs ", "prompt-worker serve"]


def test_serve_help_installs_and_starts_nothing(tree: Path) -> None:
    run(tree, "ensure-venv")
    assert run(tree, "serve", "--help") == ["prompt-worker serve --help"]


def test_serve_reads_the_config_of_the_readmes_render_example(tree: Path) -> None:
    # The README's client example talks to this worker; its prompt is the `render`
    # example's only when both read the same MCP server registry.
    config = render_example_config()
    assert (REPO / config).is_file()
    write(
        tree / ".venv" / "bin" / "prompt-worker",
        RECORDER.format(name="prompt-worker config=${PROMPT_WORKER_CONFIG-unset}"),
    )
    run(tree, "ensure-venv")
    environ = {k: v for k, v in os.environ.items() if k != "PROMPT_WORKER_CONFIG"}
    assert run(tree, "serve", env=environ)[-1] == f"prompt-worker config={config} serve"
    # Set, even empty, the variable wins; so does --config (over the variable, in serve).
    chosen = run(tree, "serve", "--config", "x.yaml", env={"PROMPT_WORKER_CONFIG": ""})
    assert chosen[-1] == "prompt-worker config= serve --config x.yaml"


@pytest.mark.slow
def test_a_real_first_install_prints_no_setuptools_banner(tmp_path: Path) -> None:
    """The first scripts/serve installs the package for real, from the lock: the
    installer's --quiet must not let setuptools' editable-install warning through."""
    root = tmp_path / "repo"
    write(root / "scripts" / "ensure-venv", (SCRIPTS / "ensure-venv").read_text())
    for name in ("pyproject.toml", "uv.lock", "README.md"):
        shutil.copy(REPO / name, root / name)
    for package in ("worker", "schemas"):
        shutil.copytree(
            REPO / package, root / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    result = subprocess.run(
        [str(root / "scripts" / "ensure-venv")],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert (root / ".venv" / "bin" / "prompt-worker").exists()
    output = result.stdout + result.stderr
    assert "Editable installation" not in output, output
    assert "BuildBackendWarning" not in output, output
