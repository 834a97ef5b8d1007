"""Each command imports only what it uses (issue 16): the modules a command's cheapest
form leaves in `sys.modules`, run in a fresh interpreter as a user runs it.

An import-set assertion, not a timing: the start-up figures are in bench/bench_startup.py
and docs/PERFORMANCE.md, "Command start-up".
"""

import ctypes
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli import prompt_worker
from tests.data import BENCH_JOBS, REPO
from worker import cli

# Runs the CLI and, at exit, writes the names in sys.modules to the file named first.
PROBE = """
import atexit, sys
out = sys.argv.pop(1)
atexit.register(lambda: open(out, "w").write("\\n".join(sorted(sys.modules))))
from worker.cli import main
raise SystemExit(main(sys.argv[1:]))
"""

TRANSPORT = {"aio_pika", "aiormq", "aiohttp", "prometheus_client", "worker.transport", "worker.ops"}
LOGGING = {"structlog", "rich"}
# What printing help or a shipped document needs none of.
EVERYTHING = (
    TRANSPORT
    | LOGGING
    | {
        "pydantic",
        "yaml",
        "orjson",
        "hyperscan",
        "re2",
        "importlib.metadata",
        "schemas",
        "worker.render",
        "worker.masking",
        "worker.families",
        "worker.rerender",
    }
)
CONFIG = str(BENCH_JOBS / "worker.yaml")
JOB = str(BENCH_JOBS / "typical_react_job.json")


def imported(tmp_path: Path, *argv: str, stdin: bytes = b"") -> set[str]:
    """The modules loaded by `prompt-worker ARGV` (which must exit 0)."""
    out = tmp_path / "modules.txt"
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(out), *argv],
        input=stdin,
        capture_output=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    return set(out.read_text().split())


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["--version"],
        ["schema"],
        ["schema", "reply"],
        ["asyncapi"],
        *([name, "--help"] for name in ("render", "mask", "report", "schema", "asyncapi")),
    ],
    ids=" ".join,
)
def test_help_and_shipped_documents_import_nothing_heavy(tmp_path: Path, argv: list[str]) -> None:
    modules = imported(tmp_path, *argv)
    assert "worker.cli" in modules  # the probe saw the command run
    assert not modules & EVERYTHING


def test_render_of_one_job_needs_no_transport_or_logging(tmp_path: Path) -> None:
    modules = imported(tmp_path, "render", "--config", CONFIG, JOB)
    assert "worker.render.renderer" in modules
    assert "hyperscan" in modules or "worker.masking.libhs" in modules  # masking is on
    assert not modules & (TRANSPORT | LOGGING)


def test_render_of_one_job_leaves_out_what_only_other_paths_need(tmp_path: Path) -> None:
    # The reply models (clients, schema documents), difflib (configuration error hints,
    # `mask`'s change list) and the linker search for libhs (only when its soname is
    # missing) cost every run of `render` start-up time otherwise.
    modules = imported(tmp_path, "render", "--config", CONFIG, JOB)
    assert "worker.render.renderer" in modules
    unwanted = {"schemas.reply", "difflib"}
    if _libhs_soname_loads():
        # Without it (a machine without libhyperscan5, as under scripts/test --quick)
        # the linker search is the expected path.
        unwanted |= {"ctypes.util", "subprocess"}
    assert not modules & unwanted


def _libhs_soname_loads() -> bool:
    try:
        ctypes.CDLL("libhs.so.5")
    except OSError:
        return False
    return True


def test_render_with_a_warm_cache_parses_no_yaml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first run keeps the parsed worker.yaml beside the masking database; the
    # next reads it back without importing PyYAML (worker/render/config_cache.py).
    monkeypatch.setenv("PROMPT_WORKER_CACHE_DIR", str(tmp_path / "cache"))
    assert "yaml" in imported(tmp_path, "render", "--config", CONFIG, JOB)
    modules = imported(tmp_path, "render", "--config", CONFIG, JOB)
    assert "worker.render.renderer" in modules
    assert "yaml" not in modules


def test_mask_of_one_text_needs_no_transport_or_logging(tmp_path: Path) -> None:
    modules = imported(tmp_path, "mask", "--config", CONFIG, "-", stdin=b"password=hunter2\n")
    assert "worker.masking.masker" in modules
    assert not modules & (TRANSPORT | LOGGING)


@pytest.mark.parametrize("command", ["serve", "replay-dead"])
def test_broker_commands_help_leaves_http_metrics_and_logging_out(
    tmp_path: Path, command: str
) -> None:
    modules = imported(tmp_path, command, "--help")
    assert not modules & {"aiohttp", "prometheus_client", "worker.ops", *LOGGING}


@pytest.mark.parametrize("command", ["serve", "replay-dead"])
def test_broker_commands_help_is_built_from_the_flags_table_alone(
    tmp_path: Path, command: str
) -> None:
    # The typed settings (pydantic-settings) and the broker client are for running.
    modules = imported(tmp_path, command, "--help")
    assert "worker.transport.setting_flags" in modules
    assert not modules & {"pydantic", "pydantic_settings", "aio_pika", "worker.transport.settings"}


@pytest.mark.parametrize("command", cli.COMMANDS)
def test_every_command_has_help_and_arguments(command: str) -> None:
    module = cli.command_module(command)
    assert module.HELP and module.__doc__
    assert callable(module.add_arguments) and callable(module.run)
    result = prompt_worker(command, "--help")
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode().startswith(f"usage: prompt-worker {command}")


def test_top_level_help_lists_every_command_with_its_help(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    assert exit_info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for command in cli.COMMANDS:
        assert f"{command} {' '.join(cli.command_module(command).HELP.split())}" in out


def test_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["no-such-command"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "prompt-worker: error: unknown command 'no-such-command': choose one of serve, "
        "render, rerender, report, replay-dead, mask, schema, asyncapi"
    )
