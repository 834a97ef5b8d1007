"""`rerender --budget TOKENS [--tokenizer NAME]`: what a smaller model would have been sent."""

import asyncio
import json
from pathlib import Path

import orjson
import pytest

from tests.integration.conftest import start_worker, topo
from tests.integration.helpers import AMQP_URL, StartWorker
from tests.render.budget.jobs import investigation
from tests.rerender.files import CONFIG, records, write_lines
from worker.cli import main
from worker.rerender.lines import parse_line
from worker.transport.link.topology import Topology

__all__ = ["start_worker", "topo"]  # fixtures of the integration suite, used here


def budget_input(path: Path) -> Path:
    """A long session without a budget, the same with a generous one of its own, and a
    wrapped line with the messages sent at the time."""
    bare = investigation(80)
    own = {**investigation(80, max_prompt_tokens=500_000), "job_id": "own-budget"}
    wrapped = {"job": {**investigation(80), "job_id": "wrapped"}, "messages": []}
    return write_lines(path, [orjson.dumps(line).decode() for line in (bare, own, wrapped)])


def rerender(source: Path, out: Path, *options: str) -> int:
    argv = ["rerender", str(source), "--out", str(out), "--progress", "off", *options]
    return main(argv)


def check_records(out: Path) -> None:
    bare, own, wrapped = records(out)
    assert bare is not None and own is not None and wrapped is not None
    for record in (bare, wrapped):
        budget = record["meta"]["budget"]
        assert budget["max_prompt_tokens"] == 3000
        assert budget["tokenizer"] == "cl100k_base"
        assert budget["trimmed"] and budget["prompt_tokens"] <= 3000
    # A job's own budget is kept.
    assert own["meta"]["budget"]["max_prompt_tokens"] == 500_000
    assert not own["meta"]["budget"]["trimmed"]


def test_the_budget_applies_to_every_job_without_one(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    source = budget_input(tmp_path / "in.jsonl")
    options = ("--budget", "3000", "--tokenizer", "cl100k_base", "--config", CONFIG)
    assert rerender(source, out, *options, "--workers", "1") == 0
    check_records(out)


def test_without_budget_nothing_is_trimmed(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    assert rerender(budget_input(tmp_path / "in.jsonl"), out, "--config", CONFIG) == 0
    bare, _, _ = records(out)
    assert bare is not None and "budget" not in bare["meta"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (("--tokenizer", "cl100k_base"), "--tokenizer needs --budget"),
        (("--budget", "100", "--tokenizer", "p50k_base"), "'p50k_base' is not available"),
    ],
)
def test_bad_budget_options_exit_2_with_a_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: tuple[str, ...], message: str
) -> None:
    source = budget_input(tmp_path / "in.jsonl")
    assert rerender(source, tmp_path / "out.jsonl", *options) == 2
    assert message in capsys.readouterr().err


def test_a_line_without_budget_is_given_the_default_one_for_the_broker() -> None:
    default = {"max_prompt_tokens": 10, "tokenizer": "estimate"}
    line = parse_line(orjson.dumps({"job_id": "a", "kind": "react"}), default)
    assert line.body is not None and orjson.loads(line.body)["budget"] == default
    own = orjson.dumps({"job_id": "a", "kind": "react", "budget": {"max_prompt_tokens": 5}})
    assert parse_line(own, default).body == own


@pytest.mark.broker
def test_the_broker_engine_applies_it_too(
    tmp_path: Path, topo: Topology, start_worker: StartWorker
) -> None:
    asyncio.run(start_worker().wait_ready())
    out = tmp_path / "out.jsonl"
    source = budget_input(tmp_path / "in.jsonl")
    options = ("--budget", "3000", "--tokenizer", "cl100k_base")
    broker = (f"--broker={AMQP_URL}", "--request-queue", topo.request_queue)
    assert rerender(source, out, *options, *broker) == 0
    check_records(out)
    local = tmp_path / "local.jsonl"
    assert rerender(source, local, *options, "--config", CONFIG, "--workers", "1") == 0
    assert json.loads(out.read_bytes().splitlines()[0]) == json.loads(
        local.read_bytes().splitlines()[0]
    )


def test_the_report_gives_the_cacheable_share_of_the_prompts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, report = tmp_path / "out.jsonl", tmp_path / "report.json"
    source = budget_input(tmp_path / "in.jsonl")
    options = ("--budget", "3000", "--tokenizer", "cl100k_base", "--config", CONFIG)
    assert rerender(source, out, *options, "--report", str(report)) == 0
    caches = [record["meta"]["cache"] for record in records(out) if record is not None]
    stable = sum(cache["stable_tokens"] for cache in caches)
    prompt = sum(cache["prompt_tokens"] for cache in caches)
    assert 0 < stable < prompt
    cacheable = json.loads(report.read_text())["totals"]["cacheable"]
    assert cacheable == {
        "stable_tokens": stable,
        "prompt_tokens": prompt,
        "share": round(stable / prompt, 3),
    }
    printed = capsys.readouterr()
    summary = printed.out + printed.err
    assert f"cacheable prefix: {stable / prompt:.1%} of {prompt:,} prompt tokens" in summary
