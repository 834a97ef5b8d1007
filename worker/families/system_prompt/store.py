"""Mode and tier templates (seed 003's TieredPromptStore), resolved once at start-up.

Lookup order for each (mode, tier): the configured `templates_dir`, the bundled
templates, then bundled `developer/tier3.md` (seed 003's last resort). The order is
resolved when the store is built, so a job costs one dictionary lookup.

Template files are `<mode>/tier<N>.md`. Their text is stripped of surrounding
whitespace: sections are joined by exactly one blank line, and a file's trailing
newline would otherwise make it two.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from importlib.resources.abc import Traversable
from pathlib import Path
from types import MappingProxyType

from schemas.system_prompt import Mode
from worker.errors import ConfigError
from worker.families.system_prompt.tiers import TIERS

TemplateKey = tuple[Mode, int]

FALLBACK: TemplateKey = (Mode.DEVELOPER, 3)


class TemplateSource(StrEnum):
    CONFIGURED = "configured"
    BUNDLED = "bundled"
    FALLBACK = "fallback"


@dataclass(frozen=True, slots=True)
class ResolvedTemplate:
    text: str
    source: TemplateSource


def template_filename(tier: int) -> str:
    return f"tier{tier}.md"


def all_keys() -> list[TemplateKey]:
    """Every (mode, tier) in declaration order, the order the template version hashes."""
    return [(mode, tier) for mode in Mode for tier in TIERS]


def read_bundled(root: Traversable) -> dict[TemplateKey, str]:
    """The templates found under `root`; a missing file is simply absent."""
    found: dict[TemplateKey, str] = {}
    for mode, tier in all_keys():
        entry = root / mode.value / template_filename(tier)
        if entry.is_file():
            found[mode, tier] = entry.read_text(encoding="utf-8").strip()
    return found


def read_directory(directory: Path) -> dict[TemplateKey, str]:
    """The override templates in `directory`, checked strictly.

    A misspelt mode directory or file name would otherwise fall back to the bundled
    template without a word, so anything that looks like a template but is not one is
    a ConfigError. Plain files at the top (a README) and hidden entries are ignored.
    """
    where = f"templates_dir {directory}"
    if not directory.exists():
        raise ConfigError(f"{where}: no such directory")
    if not directory.is_dir():
        raise ConfigError(f"{where}: not a directory")
    modes = {mode.value: mode for mode in Mode}
    names = {template_filename(tier): tier for tier in TIERS}
    found: dict[TemplateKey, str] = {}
    try:
        for mode_dir in sorted(directory.iterdir()):
            if mode_dir.name.startswith(".") or not mode_dir.is_dir():
                continue
            mode = modes.get(mode_dir.name)
            if mode is None:
                raise ConfigError(
                    f"{where}: unknown mode directory {mode_dir.name!r} (modes: {', '.join(modes)})"
                )
            for entry in sorted(mode_dir.iterdir()):
                if entry.name.startswith("."):
                    continue
                tier = names.get(entry.name)
                if tier is None or not entry.is_file():
                    raise ConfigError(
                        f"{where}: unexpected {mode_dir.name}/{entry.name} "
                        f"(templates are {mode_dir.name}/tier1.md .. tier{TIERS[-1]}.md)"
                    )
                found[mode, tier] = entry.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where}: a template is not UTF-8 text: {exc}") from None
    return found


@dataclass(frozen=True, slots=True)
class TemplateStore:
    templates: Mapping[TemplateKey, ResolvedTemplate]

    @classmethod
    def build(
        cls,
        bundled: Mapping[TemplateKey, str],
        configured: Mapping[TemplateKey, str] | None = None,
    ) -> "TemplateStore":
        configured = configured or {}
        fallback = bundled.get(FALLBACK)
        templates: dict[TemplateKey, ResolvedTemplate] = {}
        for key in all_keys():
            if key in configured:
                templates[key] = ResolvedTemplate(configured[key], TemplateSource.CONFIGURED)
            elif key in bundled:
                templates[key] = ResolvedTemplate(bundled[key], TemplateSource.BUNDLED)
            elif fallback is not None:
                templates[key] = ResolvedTemplate(fallback, TemplateSource.FALLBACK)
            else:
                mode, tier = key
                raise ConfigError(
                    f"no template for {mode.value}/{template_filename(tier)} and the bundled "
                    f"fallback {FALLBACK[0].value}/{template_filename(FALLBACK[1])} is missing "
                    "(incomplete installation?)"
                )
        return cls(MappingProxyType(templates))

    def get(self, mode: Mode, tier: int) -> ResolvedTemplate:
        return self.templates[mode, tier]
