"""Which distributions a source tree imports, and which of them pyproject.toml declares.

Every import statement of every module is read with `ast` (function-local and
TYPE_CHECKING imports included: a lazy import is still a dependency). Each top-level
module name is mapped to the distributions that install it
(`importlib.metadata.packages_distributions()`); standard-library and first-party
modules are left out. An import is undeclared when none of the distributions that
provide it is named in the requirement list it is checked against, or when no installed
distribution provides it at all.
"""

import ast
import re
import sys
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

# A requirement's distribution name: what precedes its extras, version bounds and markers.
_REQUIREMENT_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[([^\]]*)\])?")


def normalize(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Declared:
    """The distributions pyproject.toml names, per group."""

    project: str
    runtime: frozenset[str]
    extras: Mapping[str, frozenset[str]]

    def names(self, extras: Iterable[str]) -> frozenset[str]:
        """The runtime dependencies with the given extras (self-references expanded)."""
        return self.runtime.union(*(self.extras[extra] for extra in extras))


def read_declared(pyproject: Path) -> Declared:
    project = tomllib.loads(pyproject.read_text())["project"]
    own = normalize(project["name"])
    groups: dict[str, list[str]] = {"": project.get("dependencies", [])}
    groups.update(project.get("optional-dependencies", {}))

    def expand(group: str, seen: frozenset[str]) -> frozenset[str]:
        names: set[str] = set()
        for requirement in groups[group]:
            match = _REQUIREMENT_NAME.match(requirement)
            if match is None:
                raise ValueError(f"cannot read the requirement {requirement!r}")
            name, extras = normalize(match.group(1)), match.group(2)
            if name != own:
                names.add(name)
                continue
            # `build-prompt-worker[tokenizers]`: the project's own extras, folded in.
            for extra in (extras or "").split(","):
                if extra.strip() and extra.strip() not in seen:
                    names |= expand(extra.strip(), seen | {extra.strip()})
        return frozenset(names)

    extras = {group: expand(group, frozenset({group})) for group in groups if group}
    return Declared(own, expand("", frozenset()), extras)


def imported_modules(roots: Iterable[Path]) -> dict[str, set[Path]]:
    """Top-level module name -> the files that import it (absolute imports only)."""
    found: dict[str, set[Path]] = {}
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                names: list[str] = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                for name in names:
                    found.setdefault(name.split(".")[0], set()).add(path)
    return found


@dataclass(frozen=True)
class Undeclared:
    module: str
    # The distributions that provide it; empty when no installed one does.
    distributions: tuple[str, ...]
    files: tuple[Path, ...]


def undeclared_imports(
    roots: Iterable[Path],
    declared: Iterable[str],
    first_party: Iterable[str],
    providers: Mapping[str, list[str]],
) -> list[Undeclared]:
    """The imports under `roots` that no distribution in `declared` provides."""
    allowed = {normalize(name) for name in declared}
    local = set(first_party)
    problems = []
    for module, files in sorted(imported_modules(roots).items()):
        if module in sys.stdlib_module_names or module in local:
            continue
        distributions = tuple(sorted({normalize(name) for name in providers.get(module, [])}))
        if not allowed.intersection(distributions):
            problems.append(Undeclared(module, distributions, tuple(sorted(files))))
    return problems
