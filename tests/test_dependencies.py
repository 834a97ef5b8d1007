"""Every distribution the code imports is declared in pyproject.toml (issue 30).

`worker/` and `schemas/` may import only the runtime dependencies and the optional
extras a user installs for a feature (`tokenizers`); `tests/` and `bench/` may import
those and the `test` extra. Imports are read from the source (tests/dependencies.py);
modules are mapped to distributions with importlib.metadata, as installed here.
"""

import os
import subprocess
import sys
from collections.abc import Mapping
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from tests.dependencies import (
    Declared,
    imported_modules,
    read_declared,
    undeclared_imports,
)

REPO = Path(__file__).resolve().parent.parent
# The project's own top-level modules: its packages, bench's scripts importing each
# other by name, and the copies of another checkout bench_masking_versus.py imports.
FIRST_PARTY = frozenset(
    {"worker", "schemas", "tests", "bench", "_other_worker", "_other_schemas"}
    | {path.stem for path in (REPO / "bench").glob("*.py")}
)
RUNTIME_ROOTS = (REPO / "worker", REPO / "schemas")
TEST_ROOTS = (REPO / "tests", REPO / "bench")


@pytest.fixture(scope="module")
def declared() -> Declared:
    return read_declared(REPO / "pyproject.toml")


@pytest.fixture(scope="module")
def providers() -> Mapping[str, list[str]]:
    return packages_distributions()


def test_the_imports_are_read_from_the_real_tree() -> None:
    # Guards the checks below against passing on an empty or misread tree.
    runtime = imported_modules(RUNTIME_ROOTS)
    assert {"aiormq", "pamqp", "yarl", "pydantic", "orjson"} <= runtime.keys()
    # aio-pika is the tests' and benchmarks' client, not the worker's.
    assert "aio_pika" not in runtime
    assert REPO / "worker" / "transport" / "consumer" / "delivery.py" in runtime["pamqp"]
    assert {"pytest", "hypothesis"} <= imported_modules(TEST_ROOTS).keys()


def test_the_declared_groups_are_read(declared: Declared) -> None:
    assert {"aiormq", "pamqp", "pyyaml"} <= declared.runtime
    assert "aio-pika" in declared.extras["test"]
    assert "tiktoken" in declared.extras["tokenizers"]
    # The test extra names the project's own `tokenizers` extra: folded in, not the
    # project itself.
    assert {"pytest", "tiktoken"} <= declared.extras["test"]
    assert "build-prompt-worker" not in declared.names(["test"])


def test_runtime_code_imports_only_runtime_dependencies(
    declared: Declared, providers: Mapping[str, list[str]]
) -> None:
    allowed = declared.names(extra for extra in declared.extras if extra != "test")
    assert undeclared_imports(RUNTIME_ROOTS, allowed, FIRST_PARTY, providers) == []


def test_tests_and_benchmarks_import_only_declared_distributions(
    declared: Declared, providers: Mapping[str, list[str]]
) -> None:
    allowed = declared.names(declared.extras)
    assert undeclared_imports(TEST_ROOTS, allowed, FIRST_PARTY, providers) == []


def test_the_lock_is_up_to_date_with_pyproject() -> None:
    # Everything installs from uv.lock, frozen: a bound changed in pyproject.toml without
    # `uv lock` would otherwise never reach an install. (--offline: an up-to-date lock is
    # checked without the index; a stale one fails either way.)
    uv = Path(sys.executable).parent / "uv"
    result = subprocess.run(
        [str(uv), "lock", "--check", "--offline", "--python", sys.executable],
        cwd=REPO,
        env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_an_undeclared_import_is_found(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "toy"\ndependencies = ["aio-pika>=10.2", "PyYAML>=6"]\n'
        '[project.optional-dependencies]\ntest = ["toy[extra]", "pytest"]\nextra = ["orjson"]\n'
    )
    source = tmp_path / "toy"
    source.mkdir()
    (source / "link.py").write_text(
        "import json\nimport yaml\nimport aio_pika\nfrom toy import helpers\n\n"
        "def lazily():\n    from aiormq.abc import ChannelFrame\n    import pytest\n"
    )
    (source / "helpers.py").write_text("from . import link\nimport not_installed_anywhere\n")
    providers = {
        "yaml": ["PyYAML"],
        "aio_pika": ["aio-pika"],
        "aiormq": ["aiormq"],
        "pytest": ["pytest"],
    }
    toy = read_declared(tmp_path / "pyproject.toml")
    assert toy.names(["test"]) == {"aio-pika", "pyyaml", "pytest", "orjson"}

    runtime = undeclared_imports([source], toy.runtime, {"toy"}, providers)
    assert [(found.module, found.distributions) for found in runtime] == [
        ("aiormq", ("aiormq",)),  # a function-local import counts too
        ("not_installed_anywhere", ()),
        ("pytest", ("pytest",)),  # declared, but only for the tests
    ]
    assert runtime[0].files == (source / "link.py",)
    with_tests = undeclared_imports([source], toy.names(["test"]), {"toy"}, providers)
    assert [found.module for found in with_tests] == ["aiormq", "not_installed_anywhere"]
