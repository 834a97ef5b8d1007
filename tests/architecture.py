"""Reading a package tree's import graph with `ast`, and the checks run on it."""

import ast
from collections.abc import Sequence
from pathlib import Path

# Module -> the modules (of the packages read) it imports.
ImportGraph = dict[str, set[str]]


def _module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def read_import_graph(root: Path, packages: Sequence[str]) -> ImportGraph:
    """Every module under `root/<package>`, with the modules of `packages` it imports.

    `from a import b` counts as importing `a.b` when that is a module, else `a`; a
    package's `__init__` is not counted as imported by its submodules (Python runs it
    first, but a submodule cannot depend on what the package is still importing).
    """
    files = {
        _module_name(root, path): path
        for package in packages
        for path in sorted((root / package).rglob("*.py"))
    }
    graph: ImportGraph = {}
    for module, path in files.items():
        is_package = path.name == "__init__.py"
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(module, is_package, node.module, node.level)
                for alias in node.names:
                    child = f"{base}.{alias.name}"
                    targets.add(child if child in files else base)
        graph[module] = {
            target for target in targets if target != module and target.split(".")[0] in packages
        }
    return graph


def _absolute(module: str, is_package: bool, name: str | None, level: int) -> str:
    if level == 0:
        assert name is not None
        return name
    parts = module.split(".")
    anchor = parts if is_package else parts[:-1]
    anchor = anchor[: len(anchor) - (level - 1)]
    return ".".join([*anchor, name] if name else anchor)


def find_cycle(graph: ImportGraph) -> list[str] | None:
    """One import cycle as a path that ends where it starts, or None."""
    done: set[str] = set()
    for start in sorted(graph):
        if start in done:
            continue
        path: list[str] = []
        on_path: set[str] = set()
        stack: list[tuple[str, list[str]]] = [(start, sorted(graph.get(start, ())))]
        path.append(start)
        on_path.add(start)
        while stack:
            node, pending = stack[-1]
            if not pending:
                stack.pop()
                path.pop()
                on_path.discard(node)
                done.add(node)
                continue
            target = pending.pop()
            if target in on_path:
                return [*path[path.index(target) :], target]
            if target in done or target not in graph:
                continue
            stack.append((target, sorted(graph[target])))
            path.append(target)
            on_path.add(target)
    return None


def _place(module: str, layers: Sequence[Sequence[str]]) -> tuple[int, str] | None:
    """The layer index and the package root a module belongs to (longest root wins)."""
    best: tuple[int, str] | None = None
    for index, layer in enumerate(layers):
        for root in layer:
            if (module == root or module.startswith(root + ".")) and (
                best is None or len(root) > len(best[1])
            ):
                best = (index, root)
    return best


def layer_violations(graph: ImportGraph, layers: Sequence[Sequence[str]]) -> list[str]:
    """Imports that go up the layers, or sideways between two packages of one layer."""
    found = []
    for module, targets in sorted(graph.items()):
        here = _place(module, layers)
        if here is None:
            continue
        for target in sorted(targets):
            there = _place(target, layers)
            if there is None or there[1] == here[1]:
                continue
            if there[0] < here[0]:
                found.append(f"{module} -> {target} (upward)")
            elif there[0] == here[0]:
                found.append(f"{module} -> {target} (sideways)")
    return found
