"""`schema` and `asyncapi` print the documents committed in `schemas/`, and generate
them (--write) equal to those files; the commands' own copies of names must agree with
the modules they avoid importing."""

from pathlib import Path

import pytest

from schemas import asyncapi
from schemas.json_schema import SCHEMA_FILES
from tests.cli import prompt_worker
from tests.data import REPO
from worker.commands import asyncapi_cmd, common, schema_cmd
from worker.commands.shipped import shipped_text
from worker.render import config


def output(*args: str) -> str:
    result = prompt_worker(*args)
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode()


@pytest.mark.parametrize("which", sorted(SCHEMA_FILES))
def test_schema_prints_the_committed_document(which: str) -> None:
    committed = (REPO / "schemas" / SCHEMA_FILES[which]).read_text(encoding="utf-8")
    assert output("schema", which) == committed


def test_schema_write_generates_the_committed_documents(tmp_path: Path) -> None:
    """--write generates from the models (it prints nothing shipped): what it writes
    must be the files in schemas/, which the commands print and the docs cite."""
    output("schema", "--write", str(tmp_path))
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(SCHEMA_FILES.values())
    for filename in SCHEMA_FILES.values():
        committed = (REPO / "schemas" / filename).read_text(encoding="utf-8")
        assert (tmp_path / filename).read_text(encoding="utf-8") == committed, filename


def test_asyncapi_prints_the_committed_document() -> None:
    committed = (REPO / "schemas" / asyncapi_cmd.ASYNCAPI_FILE).read_text(encoding="utf-8")
    assert output("asyncapi") == committed


def test_asyncapi_write_generates_the_committed_document(tmp_path: Path) -> None:
    written = tmp_path / "asyncapi.yaml"
    output("asyncapi", "--write", str(written))
    committed = (REPO / "schemas" / asyncapi_cmd.ASYNCAPI_FILE).read_text(encoding="utf-8")
    assert written.read_text(encoding="utf-8") == committed


def test_the_commands_copies_of_names_agree() -> None:
    assert schema_cmd.SCHEMA_FILES == SCHEMA_FILES
    assert asyncapi_cmd.ASYNCAPI_FILE == asyncapi.ASYNCAPI_FILE
    assert common.CONFIG_ENV == config.CONFIG_ENV


def test_shipped_text_reads_the_package_files() -> None:
    assert shipped_text("job.schema.json") == (REPO / "schemas" / "job.schema.json").read_text(
        encoding="utf-8"
    )
    assert shipped_text("no-such-file.json") is None
