"""Helpers shared by the system_prompt tests: jobs, configs and direct builds."""

import json
from pathlib import Path
from typing import Any

from schemas.job import Job
from tests.families.seed_text import seed_003_tiers
from worker.families.base import BuildResult, RenderContext
from worker.families.system_prompt.builder import FAMILY, prepare
from worker.render.config import WorkerConfig, parse_config

REPO = Path(__file__).resolve().parents[3]
BUNDLED_DIR = REPO / "worker" / "templates" / "system_prompt"
MODES = ("assistant", "developer", "planning", "debugger", "user")
TIERS = (1, 2, 3, 4, 5)
# Seed 003's tier table, rather than anything of the code under test.
BUDGETS = {tier: budget for tier, (_, budget) in seed_003_tiers().items()}


def job(payload: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"job_id": "sp-1", "kind": "system_prompt", "system_prompt": payload, **fields}


def parse_job(data: dict[str, Any]) -> Job:
    """Validate as the renderer does: JSON text -> python objects -> model."""
    return Job.model_validate(json.loads(json.dumps(data)))


def context(config: WorkerConfig | dict[str, Any] | None = None) -> RenderContext:
    if config is None:
        config = WorkerConfig()
    elif isinstance(config, dict):
        config = parse_config(config)
    return RenderContext(
        registry=config.registry(), family_state={FAMILY.name: prepare(config.system_prompt())}
    )


def build(
    payload: dict[str, Any], config: WorkerConfig | dict[str, Any] | None = None
) -> BuildResult:
    return FAMILY.build(parse_job(job(payload)), context(config))


def system_text(result: BuildResult) -> str:
    assert [m["role"] for m in result.messages] == ["system"]
    return result.messages[0]["content"]


def bundled(mode: str, tier: int) -> str:
    return (BUNDLED_DIR / mode / f"tier{tier}.md").read_text(encoding="utf-8")


def guidance_lines(text: str) -> list[str]:
    """The non-blank lines of a template: its unit of guidance (docs/SYSTEM_PROMPTS.md)."""
    return [line for line in text.splitlines() if line.strip()]


def is_subsequence(small: list[str], big: list[str]) -> bool:
    remaining = iter(big)
    return all(any(item == candidate for candidate in remaining) for item in small)
