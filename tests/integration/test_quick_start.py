"""The README's first two examples agree: the quick-start worker (scripts/serve reads
the `render` example's configuration, tests/deploy/test_serve_scripts.py) answers the
client example's job with the messages `prompt-worker render` prints for it."""

import json

import pytest

from tests.cli import prompt_worker
from tests.data import BENCH_JOBS, REPO
from tests.integration.helpers import StartWorker
from tests.readme import render_example_config
from worker.transport.producers.client import PromptClient

pytestmark = pytest.mark.broker

# The job both examples send.
JOB = BENCH_JOBS / "typical_react_job.json"


async def test_the_client_example_gets_the_render_examples_prompt(
    start_worker: StartWorker, client: PromptClient
) -> None:
    config = render_example_config()
    rendered = prompt_worker("render", str(JOB), "--config", config)
    assert rendered.returncode == 0, rendered.stderr.decode()
    expected = json.loads(rendered.stdout)
    worker = start_worker(config=REPO / config)
    await worker.wait_ready()
    reply = await client.build(json.loads(JOB.read_text(encoding="utf-8")), timeout=60)
    assert reply["status"] == "ok", reply
    assert reply["messages"] == expected["messages"]
    assert reply["meta"]["prompt_chars"] == expected["meta"]["prompt_chars"]
    # The MCP server registry is in: tier 2 carries its instructions.
    assert "For Kubernetes work:" in reply["messages"][0]["content"]
