"""The suite's skip policy (tests/unavailable.py), run both ways on a small suite of its
own: without CI a missing broker or tool skips the test; under CI=true it fails it."""

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.data import REPO
from tests.integration.helpers import free_port

CONFTEST = "from tests.unavailable import pytest_runtest_setup as pytest_runtest_setup\n"
SUITE = """
import pytest
from tests.unavailable import needs, tool

@pytest.mark.broker
def test_broker():
    pass

def test_tool():
    tool("prompt-worker-no-such-tool", "nothing installs it")

@needs(lambda: False, "a condition", "nothing makes it true")
def test_condition():
    pass

@needs(lambda: True, "a condition", "it holds")
def test_condition_met():
    pass
"""


def outcomes(tmp_path: Path, ci: bool) -> dict[str, tuple[str, str]]:
    """Each test's outcome (passed, skipped, failed or error) and its message."""
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_suite.py").write_text(SUITE)
    report = tmp_path / "report.xml"
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = str(REPO)
    # A port nothing listens on: the broker is "down" for this suite only.
    env["PROMPT_WORKER_TEST_AMQP_URL"] = f"amqp://guest:guest@127.0.0.1:{free_port()}/"
    if ci:
        env["CI"] = "true"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", str(tmp_path),
         f"--junit-xml={report}", "--rootdir", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    results = {}
    for case in ET.parse(report).iter("testcase"):
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("skipped", "failure", "error"):
                outcome = {"failure": "failed"}.get(child.tag, child.tag)
                message = child.get("message", "")
        results[case.get("name", "")] = (outcome, message)
    return results


@pytest.mark.parametrize("ci", [False, True], ids=["developer", "CI"])
def test_missing_things_skip_for_developers_and_fail_under_ci(tmp_path: Path, ci: bool) -> None:
    results = outcomes(tmp_path, ci)
    absent = "error" if ci else "skipped"  # the broker check fails the test's set-up
    assert results["test_broker"][0] == absent
    assert "RabbitMQ at amqp://guest:guest@127.0.0.1:" in results["test_broker"][1]
    assert results["test_tool"][0] == ("failed" if ci else "skipped")
    assert "prompt-worker-no-such-tool is missing: nothing installs it" in results["test_tool"][1]
    assert results["test_condition"][0] == absent
    assert "a condition is missing: nothing makes it true" in results["test_condition"][1]
    assert results["test_condition_met"] == ("passed", "")
    if ci:
        assert "CI=true" in results["test_tool"][1]
