"""schemas/asyncapi.yaml: up to date, structurally AsyncAPI 3.0, and true to the wire.

The document is generated (schemas/asyncapi.py); these tests fail when the committed
copy is stale, when a reference inside it dangles, when its queue bindings drift from
worker.transport.link.topology, and when real jobs and replies do not match its payload schemas.
"""

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from schemas.asyncapi import ASYNCAPI_FILE, asyncapi_document
from worker import cli
from worker.commands.asyncapi_cmd import document_queues, generate
from worker.render.renderer import Renderer
from worker.transport.link import topology

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "schemas" / ASYNCAPI_FILE
CASES = ROOT / "tests" / "conformance" / "cases.jsonl"
DOC_URI = "urn:build-prompt-worker:asyncapi"


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMMITTED.read_text(encoding="utf-8"))
    return loaded


def resolve(doc: dict[str, Any], ref: str) -> Any:
    assert ref.startswith("#/"), ref
    node: Any = doc
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        assert isinstance(node, dict) and part in node, f"dangling $ref {ref}"
        node = node[part]
    return node


def all_refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return own + [ref for value in node.values() for ref in all_refs(value)]
    if isinstance(node, list):
        return [ref for item in node for ref in all_refs(item)]
    return []


def test_committed_document_is_fresh() -> None:
    assert COMMITTED.read_text(encoding="utf-8") == generate(), (
        "schemas/asyncapi.yaml is stale: run `prompt-worker asyncapi --write schemas/asyncapi.yaml`"
    )


def test_is_asyncapi_3(doc: dict[str, Any]) -> None:
    assert doc["asyncapi"] == "3.0.0"
    assert doc["info"]["title"] and doc["info"]["version"]
    assert doc["servers"]["rabbitmq"]["protocol"] == "amqp"
    assert {"channels", "operations", "components"} <= doc.keys()
    actions = {op["action"] for op in doc["operations"].values()}
    assert actions == {"send", "receive"}
    for name, message in doc["components"]["messages"].items():
        assert "payload" in message, name


def test_every_reference_resolves(doc: dict[str, Any]) -> None:
    refs = all_refs(doc)
    assert len(refs) > 20
    for ref in refs:
        resolve(doc, ref)


def test_operations_use_messages_of_their_channel(doc: dict[str, Any]) -> None:
    for name, op in doc["operations"].items():
        channel_ref = op["channel"]["$ref"]
        resolve(doc, channel_ref)
        for message in op["messages"]:
            assert message["$ref"].startswith(channel_ref + "/messages/"), name
        if "reply" in op:
            reply = op["reply"]
            for message in reply["messages"]:
                assert message["$ref"].startswith(reply["channel"]["$ref"] + "/messages/")


def test_rpc_reply_goes_to_reply_to_with_correlation_id(doc: dict[str, Any]) -> None:
    receive = [op for op in doc["operations"].values() if op["action"] == "receive"]
    assert len(receive) == 1
    assert receive[0]["reply"]["address"]["location"] == "$message.header#/reply_to"
    for name in ("job", "okReply", "errorReply"):
        message = doc["components"]["messages"][name]
        assert message["correlationId"]["location"] == "$message.header#/correlation_id"
        assert message["contentType"] == "application/json"


def test_queue_bindings_match_the_topology_the_worker_declares(doc: dict[str, Any]) -> None:
    names = topology.Topology()
    expected = {
        names.request_queue: names.request_arguments(),
        names.reply_queue: topology.reply_queue_arguments(),
        names.dead_letter_queue: topology.dead_letter_queue_arguments(),
        topology.default_archive().stream: topology.default_archive().arguments(),
    }
    seen = {}
    for channel in doc["channels"].values():
        amqp = channel.get("bindings", {}).get("amqp")
        if amqp is None:
            continue
        assert amqp["is"] == "queue"
        queue = amqp["queue"]
        assert queue["name"] == channel["address"]
        assert queue["durable"] is True
        assert queue["autoDelete"] is False
        seen[queue["name"]] = amqp["x-queue-arguments"]
    assert seen == expected
    types = {name: arguments["x-queue-type"] for name, arguments in seen.items()}
    # Quorum queues, and the archive's stream (SPEC §12).
    assert types == {**dict.fromkeys(expected, "quorum"), "build-prompt.archive": "stream"}


def test_names_can_be_overridden() -> None:
    custom = topology.Topology(request_queue="jobs", reply_queue="jobs.out", dead_letter="jobs.dlq")
    channels = asyncapi_document(document_queues(custom))["channels"]
    assert channels["requests"]["address"] == "jobs"
    args = channels["requests"]["bindings"]["amqp"]["x-queue-arguments"]
    assert args["x-dead-letter-exchange"] == "jobs.dlq"


# --- payload schemas against real jobs and replies ----------------------------------


def validator(doc: dict[str, Any], schema: str) -> jsonschema.Draft202012Validator:
    registry: Registry[Any] = Registry().with_resource(
        DOC_URI, Resource.from_contents(doc, default_specification=DRAFT202012)
    )
    return jsonschema.Draft202012Validator(
        {"$ref": f"{DOC_URI}#/components/schemas/{schema}"}, registry=registry
    )


def payload_schema_name(doc: dict[str, Any], message: str) -> str:
    ref: str = doc["components"]["messages"][message]["payload"]["$ref"]
    return ref.rsplit("/", 1)[1]


def conformance_jobs(limit: int) -> list[dict[str, Any]]:
    with CASES.open(encoding="utf-8") as handle:
        return [json.loads(line)["job"] for line, _ in zip(handle, range(limit), strict=False)]


def test_real_jobs_and_ok_replies_match_the_payload_schemas(
    doc: dict[str, Any], renderer: Renderer
) -> None:
    jobs = validator(doc, payload_schema_name(doc, "job"))
    ok = validator(doc, payload_schema_name(doc, "okReply"))
    for job in conformance_jobs(25):
        jobs.validate(job)
        outcome = renderer.render(json.dumps(job))
        assert outcome.ok, outcome.body
        ok.validate(json.loads(outcome.body))


def test_error_replies_match_and_invalid_jobs_do_not(
    doc: dict[str, Any], renderer: Renderer
) -> None:
    error = validator(doc, payload_schema_name(doc, "errorReply"))
    jobs = validator(doc, payload_schema_name(doc, "job"))
    for body in (b"{not json", b'{"job_id": "x", "kind": "no-such-kind"}'):
        outcome = renderer.render(body)
        assert not outcome.ok
        reply = json.loads(outcome.body)
        error.validate(reply)
    with pytest.raises(jsonschema.ValidationError):
        jobs.validate({"kind": "react"})  # job_id is required
    with pytest.raises(jsonschema.ValidationError):
        error.validate({"job_id": "x", "status": "ok", "error": {}})


# --- the command --------------------------------------------------------------------


def run_command(*argv: str) -> int:
    return cli.main(["asyncapi", *argv])


def test_command_prints_the_document(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_command() == 0
    assert yaml.safe_load(capsys.readouterr().out) == asyncapi_document(document_queues())


def test_command_writes_then_checks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "asyncapi.yaml"
    assert run_command("--write", str(target)) == 0
    assert target.read_text(encoding="utf-8") == generate()
    assert run_command("--check", str(target)) == 0
    target.write_text(target.read_text(encoding="utf-8").replace("3.0.0", "2.6.0", 1))
    assert run_command("--check", str(target)) == 1
    assert "stale" in capsys.readouterr().err
    assert run_command("--check", str(tmp_path / "missing.yaml")) == 2
