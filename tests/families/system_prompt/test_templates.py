"""The bundled templates and the template store: completeness, budgets, tier growth,
lookup order and the override directory."""

from pathlib import Path

import pytest

from schemas.system_prompt import Mode
from tests.families.system_prompt.helpers import (
    BUDGETS,
    BUNDLED_DIR,
    MODES,
    TIERS,
    build,
    bundled,
    context,
    guidance_lines,
    is_subsequence,
    job,
    parse_job,
    system_text,
)
from worker.errors import ConfigError
from worker.families.system_prompt.builder import FAMILY, prepare
from worker.families.system_prompt.config import SystemPromptConfig
from worker.families.system_prompt.registry import CORE_MANDATES_ID, SANITY_CHECK_ID, PromptRegistry
from worker.families.system_prompt.store import TemplateSource, TemplateStore, read_directory
from worker.render.config import WorkerConfig


def test_every_mode_has_five_bundled_tiers_and_nothing_else() -> None:
    found = sorted(str(p.relative_to(BUNDLED_DIR)) for p in BUNDLED_DIR.rglob("*") if p.is_file())
    assert found == sorted(f"{mode}/tier{tier}.md" for mode in MODES for tier in TIERS)


@pytest.mark.parametrize("tier", TIERS)
def test_user_mode_starts_as_a_copy_of_assistant(tier: int) -> None:
    assert bundled("user", tier) == bundled("assistant", tier)


@pytest.mark.parametrize("tier", TIERS)
def test_each_mode_has_its_own_guidance(tier: int) -> None:
    # Headings such as "## Tools" are shared; the guidance itself is not.
    own = ("assistant", "developer", "planning", "debugger")
    bullets = {
        m: {ln for ln in guidance_lines(bundled(m, tier)) if ln.startswith("- ")} for m in own
    }
    for mode in own:
        for other in own:
            if other != mode:
                assert bullets[mode].isdisjoint(bullets[other]), (mode, other)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tier", TIERS)
def test_template_with_builtin_mandates_and_sanity_checks_fits_the_budget(
    mode: str, tier: int
) -> None:
    result = build({"mode": mode, "tier": tier, "use_sanity_checks": True})
    text = system_text(result)
    registry = PromptRegistry.from_definitions([])
    parts = [
        bundled(mode, tier).strip(),
        registry.prompts[CORE_MANDATES_ID].content,
        registry.prompts[SANITY_CHECK_ID].content,
    ]
    # The message is exactly these three, so the budget covers every one of them.
    assert text == "\n\n".join(parts)
    assert -(-len(text) // 4) <= BUDGETS[tier]
    assert result.meta["over_budget"] is False


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tier", TIERS[:-1])
def test_each_tier_keeps_all_guidance_of_the_tier_below_and_adds_some(mode: str, tier: int) -> None:
    lower = guidance_lines(bundled(mode, tier))
    higher = guidance_lines(bundled(mode, tier + 1))
    assert is_subsequence(lower, higher), f"{mode}/tier{tier + 1}.md lost or reordered guidance"
    added = [line for line in higher if line not in lower]
    assert any(line.startswith("- ") for line in added), f"{mode}/tier{tier + 1}.md adds nothing"


@pytest.mark.parametrize("mode", MODES)
def test_tier_one_is_a_short_list_and_sections_start_at_tier_two(mode: str) -> None:
    assert not any(line.startswith("#") for line in guidance_lines(bundled(mode, 1)))
    assert any(line.startswith("## ") for line in guidance_lines(bundled(mode, 2)))


# ---- lookup order -------------------------------------------------------------------

ALL = {(mode, tier): f"bundled {mode.value} {tier}" for mode in Mode for tier in TIERS}


def test_configured_beats_bundled() -> None:
    store = TemplateStore.build(ALL, {(Mode.PLANNING, 4): "mine"})
    assert store.get(Mode.PLANNING, 4).text == "mine"
    assert store.get(Mode.PLANNING, 4).source is TemplateSource.CONFIGURED
    assert store.get(Mode.PLANNING, 3).text == "bundled planning 3"
    assert store.get(Mode.PLANNING, 3).source is TemplateSource.BUNDLED


def test_missing_everywhere_falls_back_to_bundled_developer_tier_3() -> None:
    partial = {key: text for key, text in ALL.items() if key[0] is not Mode.DEBUGGER}
    # A configured developer tier 3 does not move the last resort: it is the bundled one.
    store = TemplateStore.build(partial, {(Mode.DEVELOPER, 3): "configured dev 3"})
    for tier in TIERS:
        assert store.get(Mode.DEBUGGER, tier).text == "bundled developer 3"
        assert store.get(Mode.DEBUGGER, tier).source is TemplateSource.FALLBACK
    assert store.get(Mode.DEVELOPER, 3).text == "configured dev 3"


def test_without_the_fallback_an_unresolvable_template_is_a_config_error() -> None:
    partial = {key: text for key, text in ALL.items() if key[0] is not Mode.DEVELOPER}
    with pytest.raises(ConfigError, match=r"developer/tier3\.md"):
        TemplateStore.build(partial)
    # With nothing missing, the fallback is never needed.
    complete_without_fallback = TemplateStore.build(ALL)
    assert complete_without_fallback.get(Mode.DEBUGGER, 5).text == "bundled debugger 5"


# ---- the override directory ---------------------------------------------------------


def write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_an_override_directory_replaces_only_its_templates(tmp_path: Path) -> None:
    write(tmp_path, "debugger/tier3.md", "\nSRE debugger, tier 3.\n\n")
    write(tmp_path, "README.md", "notes for editors, not a template")
    write(tmp_path, ".git/config", "ignored")
    config = WorkerConfig(templates_dir=tmp_path)

    overridden = system_text(build({"mode": "debugger", "tier": 3}, config))
    assert overridden.startswith("SRE debugger, tier 3.\n\n## Core Mandates")
    untouched = system_text(build({"mode": "debugger", "tier": 4}, config))
    assert untouched.startswith(bundled("debugger", 4).strip() + "\n\n")


def test_templates_are_read_once_at_start_up(tmp_path: Path) -> None:
    write(tmp_path, "assistant/tier2.md", "first text")
    ctx = context(WorkerConfig(templates_dir=tmp_path))
    write(tmp_path, "assistant/tier2.md", "second text")
    (tmp_path / "assistant" / "tier2.md").unlink()

    result = FAMILY.build(parse_job(job({"tier": 2})), ctx)
    assert system_text(result).startswith("first text\n\n")


def test_a_relative_templates_dir_is_relative_to_the_config_file(tmp_path: Path) -> None:
    write(tmp_path, "conf/my-templates/planning/tier1.md", "Plan small.")
    write(tmp_path, "conf/worker.yaml", "templates_dir: my-templates\n")
    from worker.render.config import load_config

    config = load_config(tmp_path / "conf" / "worker.yaml")
    assert system_text(build({"mode": "planning", "tier": 1}, config)).startswith("Plan small.\n\n")


@pytest.mark.parametrize(
    ("relative", "message"),
    [
        ("developper/tier1.md", "unknown mode directory 'developper'"),
        ("developer/tier6.md", "unexpected developer/tier6.md"),
        ("developer/tier1.txt", "unexpected developer/tier1.txt"),
        ("developer/extra/tier1.md", "unexpected developer/extra"),
    ],
)
def test_misnamed_templates_are_config_errors(tmp_path: Path, relative: str, message: str) -> None:
    write(tmp_path, relative, "text")
    with pytest.raises(ConfigError, match=message):
        prepare(SystemPromptConfig(templates_dir=tmp_path))


def test_a_missing_or_unusable_directory_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such directory"):
        read_directory(tmp_path / "absent")
    write(tmp_path, "plain-file", "x")
    with pytest.raises(ConfigError, match="not a directory"):
        read_directory(tmp_path / "plain-file")
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "tier1.md").write_bytes(b"\xff\xfe not utf-8")
    with pytest.raises(ConfigError, match="not UTF-8"):
        read_directory(tmp_path)


def test_every_bundled_template_and_builtin_feeds_the_version() -> None:
    from worker.families.system_prompt import builder

    assert FAMILY.template_version.startswith("system_prompt-")
    texts = builder.versioned_texts()
    for mode in MODES:
        for tier in TIERS:
            assert bundled(mode, tier).strip() in texts
    registry = PromptRegistry.from_definitions([])
    assert registry.prompts[CORE_MANDATES_ID].content in texts
    assert registry.prompts[SANITY_CHECK_ID].content in texts


def test_inline_goal_text_moves_the_version(monkeypatch: pytest.MonkeyPatch) -> None:
    from worker.families.base import template_version
    from worker.families.system_prompt import builder
    from worker.families.system_prompt.goal import render_goal as original

    before = template_version("system_prompt", builder.versioned_texts())
    monkeypatch.setattr(
        builder, "render_goal", lambda goal: original(goal).replace("(IN PROGRESS)", "(WIP)")
    )
    assert template_version("system_prompt", builder.versioned_texts()) != before
