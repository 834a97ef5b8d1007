"""`schema` and `asyncapi` print the documents shipped in `schemas/`: those must be
what a fresh generation gives, and the commands' own copies of names must agree with
the modules they avoid importing."""

import pytest

from schemas import asyncapi
from schemas.json_schema import SCHEMA_FILES, render_schema
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
def test_schema_prints_a_fresh_generation(which: str) -> None:
    assert output("schema", which) == render_schema(which)


def test_asyncapi_prints_a_fresh_generation() -> None:
    assert output("asyncapi") == asyncapi_cmd.generate()


def test_the_commands_copies_of_names_agree() -> None:
    assert schema_cmd.SCHEMA_FILES == SCHEMA_FILES
    assert asyncapi_cmd.ASYNCAPI_FILE == asyncapi.ASYNCAPI_FILE
    assert common.CONFIG_ENV == config.CONFIG_ENV


def test_shipped_text_reads_the_package_files() -> None:
    assert shipped_text("job.schema.json") == (REPO / "schemas" / "job.schema.json").read_text(
        encoding="utf-8"
    )
    assert shipped_text("no-such-file.json") is None
