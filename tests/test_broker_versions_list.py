"""The suites left out of the RabbitMQ 4.0 run are named alike in scripts/test and in
docs/DEVELOPING.md, and each is a file of tests/integration; so is each file whose 4.0
run goes to lane `integration`, which must not be one left out."""

import re

from tests.data import REPO


def test_the_once_only_suites_are_listed_alike_and_exist() -> None:
    script = (REPO / "scripts" / "test").read_text(encoding="utf-8")
    in_script = _array(script, "ONCE_ON_3_10")
    developing = (REPO / "docs" / "DEVELOPING.md").read_text(encoding="utf-8")
    section = developing.split("## Two broker versions", 1)[1].split("\n## ", 1)[0]
    in_docs = set(re.findall(r"^\| `(test_\w+)\.py` \|", section, re.MULTILINE))
    assert in_script == in_docs
    for name in in_script:
        assert (REPO / "tests" / "integration" / f"{name}.py").is_file(), name
    # The test run on 4.0 by node id exists under that name.
    node = re.search(r'"tests/rerender/test_broker\.py::(\w+)"', script)
    assert node is not None
    assert f"def {node[1]}(" in (REPO / "tests/rerender/test_broker.py").read_text()


def test_the_4_0_files_of_lane_integration_exist_and_run_on_4_0() -> None:
    script = (REPO / "scripts" / "test").read_text(encoding="utf-8")
    moved = _array(script, "ON_RABBITMQ4_IN_LANE_INTEGRATION")
    assert moved
    assert not moved & _array(script, "ONCE_ON_3_10")
    for name in moved:
        assert (REPO / "tests" / "integration" / f"{name}.py").is_file(), name


def _array(script: str, name: str) -> set[str]:
    array = re.search(rf"^{name}=\(([^)]*)\)", script, re.MULTILINE)
    assert array is not None, name
    return set(array[1].split())
