"""docs/OPERATIONS.md tells the truth about the settings and commands it documents."""

import re
from pathlib import Path

import pytest
import yaml

from tests.cli import prompt_worker
from worker.commands import replay_dead_cmd
from worker.ops import metrics
from worker.render.config import load_config
from worker.transport import settings

OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "OPERATIONS.md"


def reference_rows() -> dict[str, list[str]]:
    """Configuration-reference table rows, keyed by variable name."""
    text = OPERATIONS.read_text(encoding="utf-8")
    section = text.split("## Configuration reference", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[1].startswith("`PROMPT_WORKER_"):
            rows[cells[1].strip("`")] = cells
    return rows


def test_every_serve_setting_is_documented_with_its_flag_and_default() -> None:
    rows = reference_rows()
    assert set(rows) == {spec.env for spec in settings.SETTINGS}
    defaults = settings.Settings()
    for spec in settings.SETTINGS:
        flag, _, default, meaning = rows[spec.env]
        assert flag.strip("`").split()[0] == spec.flag, spec.env
        assert meaning, spec.env
        value = getattr(defaults, spec.field)
        if value is not None:
            shown = f"{value:g}" if isinstance(value, float) else str(value)
            assert f"`{shown}`" in default, f"{spec.env}: default {shown} not in {default!r}"


def test_replay_dead_example_shows_the_real_columns() -> None:
    text = OPERATIONS.read_text(encoding="utf-8")
    header = next(line for line in text.splitlines() if line.lstrip().startswith("ACTION"))
    assert re.split(r"\s+", header.strip()) == list(replay_dead_cmd.COLUMNS)


def test_the_default_config_is_described_the_same_everywhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    words = "none: no MCP server registry, masking on"
    result = prompt_worker("serve", "--help")
    assert f"($PROMPT_WORKER_CONFIG; default {words})" in " ".join(result.stdout.decode().split())
    assert reference_rows()["PROMPT_WORKER_CONFIG"][2].startswith(words)
    # ... and that is what serve runs with.
    monkeypatch.delenv("PROMPT_WORKER_CONFIG", raising=False)
    config = load_config(settings.from_env({}).config_path)
    assert config.mcp_servers == {}
    assert config.masking.enabled


def test_every_alert_has_its_runbook() -> None:
    rules = yaml.safe_load((OPERATIONS.parents[1] / "deploy/prometheus/alerts.yml").read_text())
    alerts = {rule["alert"] for group in rules["groups"] for rule in group["rules"]}
    text = OPERATIONS.read_text(encoding="utf-8")
    section = text.split("## Answer an alert", 1)[1].split("\n## ", 1)[0]
    runbooks = set(re.findall(r"^### (\w+)$", section, re.M))
    assert len(alerts) > 5
    assert alerts <= runbooks


def test_every_exported_metric_is_in_the_metrics_table() -> None:
    text = OPERATIONS.read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| `prompt_worker_")]
    documented = {name for row in rows for name in re.findall(r"`(prompt_worker_\w+)`", row)}
    assert set(metrics.METRIC_NAMES) <= documented
