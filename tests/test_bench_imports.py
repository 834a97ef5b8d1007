"""The benchmarks import what the tree holds (they are not run by the suite)."""

import ast
import importlib
import importlib.util
from pathlib import Path

import pytest

from tests.data import REPO

SCRIPTS = sorted((REPO / "bench").glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_every_worker_import_of_a_benchmark_resolves(script: Path) -> None:
    tree = ast.parse(script.read_text(encoding="utf-8"))
    missing = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] not in ("worker", "schemas"):
                continue
            module = importlib.import_module(node.module)
            missing += [
                f"{node.module}.{alias.name}"
                for alias in node.names
                if not hasattr(module, alias.name)
                and importlib.util.find_spec(f"{node.module}.{alias.name}") is None
            ]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in ("worker", "schemas"):
                    importlib.import_module(alias.name)
    assert missing == []


def test_the_benchmarks_are_found() -> None:
    assert {path.name for path in SCRIPTS} >= {"bench_builder.py", "bench_e2e.py"}
