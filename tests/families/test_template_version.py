"""`meta.template_version`: stable, per family, and moved by any template change."""

from typing import cast

import pytest

from worker.families import FAMILIES
from worker.families.base import template_version
from worker.families.tarsy import templates


def test_version_is_stable_for_the_same_texts() -> None:
    assert template_version("tarsy", templates.ALL_TEMPLATES) == template_version(
        "tarsy", templates.ALL_TEMPLATES
    )


def test_any_text_change_moves_the_version() -> None:
    base = template_version("tarsy", templates.ALL_TEMPLATES)
    for index in range(len(templates.ALL_TEMPLATES)):
        changed = list(templates.ALL_TEMPLATES)
        changed[index] += " "
        assert template_version("tarsy", changed) != base


def test_boundaries_between_texts_count() -> None:
    assert template_version("f", ["ab", "c"]) != template_version("f", ["a", "bc"])


def test_every_seed_000_constant_is_versioned() -> None:
    constants = [
        value
        for name, value in vars(templates).items()
        if name.isupper() and isinstance(value, str)
    ]
    assert set(constants) <= set(templates.ALL_TEMPLATES)


def test_families_have_distinct_versions() -> None:
    by_family = {spec.name: spec.template_version for spec in FAMILIES.values()}
    assert by_family["tarsy"].startswith("tarsy-")
    assert len(set(by_family.values())) == len(by_family)


def test_inline_section_text_is_versioned(monkeypatch: pytest.MonkeyPatch) -> None:
    """A heading written inline in a component (not a constant) still moves the version."""
    from worker.families.tarsy import builder, components

    before = template_version("tarsy", builder.versioned_texts())
    original = components.format_runbook_section
    monkeypatch.setattr(
        builder,
        "format_runbook_section",
        lambda text: original(text).replace("## Runbook", "## Run book"),
    )
    assert template_version("tarsy", builder.versioned_texts()) != before


def test_probe_jobs_reach_every_kind() -> None:
    from schemas.job import INVESTIGATION_KINDS, Kind
    from worker.families.tarsy import builder

    kinds = {Kind(cast(str, p["kind"])) for p in builder._PROBE_JOBS}
    assert kinds == INVESTIGATION_KINDS | {
        Kind.FORCED_CONCLUSION,
        Kind.MCP_SUMMARIZATION,
        Kind.EXECUTIVE_SUMMARY,
    }
