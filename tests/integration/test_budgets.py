"""A budgeted job through a real worker and RabbitMQ: trimmed, counted, or dead-lettered."""

from typing import Any

import orjson
import pytest
from aio_pika.abc import AbstractChannel

from tests.integration.helpers import StartWorker, drain
from tests.render.budget.jobs import investigation
from worker.render.budget import tokenizers
from worker.transport.link.topology import Topology
from worker.transport.producers.client import PromptClient

pytestmark = pytest.mark.broker


async def test_a_trimmed_job_fits_its_budget_and_is_counted_by_kind(
    start_worker: StartWorker, client: PromptClient
) -> None:
    worker = start_worker()
    await worker.wait_ready()
    job = investigation(200, max_prompt_tokens=4000, tokenizer="cl100k_base")

    reply: dict[str, Any] = await client.build(job, timeout=60)

    assert reply["status"] == "ok", reply
    budget = reply["meta"]["budget"]
    cl100k = tokenizers.get("cl100k_base")
    size = sum(cl100k.count(m["content"]) for m in reply["messages"])
    assert budget["prompt_tokens"] == size <= 4000
    assert budget["trimmed"] is True
    [elision] = budget["elisions"]
    assert elision["section"] == "stage.previous_stage_events"
    user = reply["messages"][1]["content"]
    assert f"{elision['items']} earlier events" in user
    assert "event 199:" in user and "event 0:" not in user

    left_out = f'prompt_worker_budget_tokens_left_out_total{{kind="react"}} {elision["tokens"]}.0'
    await worker.metrics_showing('prompt_worker_budget_trimmed_total{kind="react"} 1.0', left_out)


async def test_an_over_budget_job_gets_its_error_and_is_dead_lettered(
    start_worker: StartWorker,
    topo: Topology,
    client: PromptClient,
    channel: AbstractChannel,
) -> None:
    worker = start_worker()
    await worker.wait_ready()
    body = orjson.dumps(investigation(3, max_prompt_tokens=10))

    reply = await client.build_bytes(body, timeout=60)

    assert reply["error"]["code"] == "over_budget"
    assert reply["error"]["details"][0]["allowed"] == 10
    [dead] = await drain(channel, topo.dead_letter_queue, 1)
    assert dead.body == body
    assert worker.process.poll() is None
