"""deploy/rabbitmq/definitions.json: the topology the worker declares, importable.

A broker provisioned from this file must accept the worker's own declarations: RabbitMQ
answers a re-declaration with different arguments with 406 PRECONDITION_FAILED and the
worker could not start. So the file is compared with `worker.transport.link.topology` offline, then
loaded into the real broker (declared from the JSON under unique names, and imported
with `rabbitmqctl import_definitions` into a scratch vhost when rabbitmqctl is usable)
and the worker's `topology.declare` is run against it.
"""

import json
import os
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import aio_pika
import pytest
from aiormq.exceptions import ChannelPreconditionFailed

from tests.aio_pika_topology import declare_topology
from tests.integration.helpers import (
    AMQP_URL,
    archive_stream,
    needs_broker,
    unique_topology,
    wait_for,
)
from tests.unavailable import missing, tool
from worker.transport.link import topology

ROOT = Path(__file__).resolve().parents[2]
DEFINITIONS = ROOT / "deploy" / "rabbitmq" / "definitions.json"
SECTIONS = ("queues", "exchanges", "bindings")


def load() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DEFINITIONS.read_text(encoding="utf-8"))
    return loaded


def by_name(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {item.get("name") or f"{item['source']}->{item['destination']}": item for item in items}


# --- offline -----------------------------------------------------------------------


def test_definitions_match_the_worker_topology() -> None:
    definitions = load()
    expected = topology.rabbitmq_definitions()
    for section in SECTIONS:
        assert by_name(definitions[section]) == by_name(expected[section]), section


def test_definitions_are_in_rabbitmq_import_format() -> None:
    definitions = load()
    assert {vhost["name"] for vhost in definitions["vhosts"]} == {"/"}
    # No users or permissions: credentials are provisioned separately, never in git.
    assert "users" not in definitions and "permissions" not in definitions
    for queue in definitions["queues"]:
        assert queue.keys() == {"name", "vhost", "durable", "auto_delete", "arguments"}
        assert queue["durable"] is True  # quorum queues must be durable
        # Quorum queues, and the archive's stream (SPEC §12).
        assert queue["arguments"]["x-queue-type"] in ("quorum", "stream")
    for binding in definitions["bindings"]:
        assert binding["destination_type"] in {"queue", "exchange"}
    # Policies would change behaviour behind the worker's declared arguments.
    assert definitions["policies"] == []


def test_spec_section_4_defaults() -> None:
    queues = by_name(load()["queues"])
    request = queues["build-prompt"]["arguments"]
    assert request["x-dead-letter-exchange"] == "build-prompt.dead"
    assert request["x-delivery-limit"] == 5
    assert {"build-prompt.dead", "build-prompt.replies"} <= queues.keys()
    (exchange,) = load()["exchanges"]
    assert (exchange["name"], exchange["type"], exchange["durable"]) == (
        "build-prompt.dead",
        "fanout",
        True,
    )


# --- against the broker ---------------------------------------------------------------


def renamed(definitions: dict[str, Any], names: dict[str, str], vhost: str) -> dict[str, Any]:
    """`definitions` with every object name (and reference to one) mapped through `names`."""
    text = json.dumps(definitions)
    result: dict[str, Any] = json.loads(text)
    for queue in result["queues"]:
        queue["name"] = names[queue["name"]]
        arguments = queue["arguments"]
        if "x-dead-letter-exchange" in arguments:
            arguments["x-dead-letter-exchange"] = names[arguments["x-dead-letter-exchange"]]
    for exchange in result["exchanges"]:
        exchange["name"] = names[exchange["name"]]
    for binding in result["bindings"]:
        binding["source"] = names[binding["source"]]
        binding["destination"] = names[binding["destination"]]
    for section in ("queues", "exchanges", "bindings"):
        for item in result[section]:
            item["vhost"] = vhost
    result["vhosts"] = [{"name": vhost}]
    return result


@pytest.fixture
def unique() -> Iterator[topology.Topology]:
    yield from unique_topology("defs")


def name_map(names: topology.Topology) -> dict[str, str]:
    defaults = topology.Topology()
    return {
        defaults.request_queue: names.request_queue,
        defaults.reply_queue: names.reply_queue,
        defaults.dead_letter: names.dead_letter,
        topology.default_archive().stream: archive_stream(names),
    }


async def declare_from_json(
    channel: aio_pika.abc.AbstractChannel, definitions: dict[str, Any]
) -> None:
    """Create what the definitions describe, argument for argument, as an import would."""
    for exchange in definitions["exchanges"]:
        await channel.declare_exchange(
            exchange["name"],
            exchange["type"],
            durable=exchange["durable"],
            auto_delete=exchange["auto_delete"],
            internal=exchange["internal"],
            arguments=exchange["arguments"],
        )
    for queue in definitions["queues"]:
        await channel.declare_queue(
            queue["name"],
            durable=queue["durable"],
            auto_delete=queue["auto_delete"],
            arguments=queue["arguments"],
        )
    for binding in definitions["bindings"]:
        destination = await channel.get_queue(binding["destination"], ensure=False)
        await destination.bind(binding["source"], routing_key=binding["routing_key"])


@needs_broker
async def test_worker_declares_cleanly_on_a_broker_provisioned_from_the_file(
    unique: topology.Topology,
) -> None:
    definitions = renamed(load(), name_map(unique), "/")
    connection = await aio_pika.connect(AMQP_URL)
    async with connection:
        await declare_from_json(await connection.channel(), definitions)
        declared = await declare_topology(await connection.channel(), unique)
        # Dead-lettering through the provisioned exchange reaches the provisioned queue.
        channel = await connection.channel()
        await channel.default_exchange.publish(
            aio_pika.Message(b"{}"), routing_key=unique.request_queue
        )
        message = await declared.request_queue.get(timeout=10)
        await message.reject(requeue=False)

        async def dead_lettered() -> bool:
            probe = await channel.declare_queue(unique.dead_letter_queue, passive=True)
            return probe.declaration_result.message_count == 1

        await wait_for(dead_lettered, 30, "the rejected job to be dead-lettered")


@needs_broker
async def test_a_differing_argument_is_refused(unique: topology.Topology) -> None:
    # The control: the broker does compare arguments, so the test above means something.
    definitions = renamed(load(), name_map(unique), "/")
    request = next(q for q in definitions["queues"] if q["name"] == unique.request_queue)
    request["arguments"]["x-delivery-limit"] += 1
    connection = await aio_pika.connect(AMQP_URL)
    async with connection:
        await declare_from_json(await connection.channel(), definitions)
        with pytest.raises(ChannelPreconditionFailed):
            await declare_topology(await connection.channel(), unique)


# --- rabbitmqctl import_definitions, into a scratch vhost --------------------------


RABBITMQCTL_HOW = "scripts/ensure-rabbitmq installs RabbitMQ, rabbitmqctl with it"


def rabbitmqctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool("rabbitmqctl", RABBITMQCTL_HOW), "-q", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def require_rabbitmqctl() -> None:
    """rabbitmqctl, and a broker that lets it in (it needs the node's Erlang cookie)."""
    listed = rabbitmqctl("list_vhosts")
    if listed.returncode != 0:
        missing(
            "a rabbitmqctl the broker answers",
            f"run the tests as root or as the rabbitmq user ({listed.stderr.strip()[:200]})",
        )


def url_for_vhost(vhost: str) -> str:
    parts = urlsplit(AMQP_URL)
    return urlunsplit(parts._replace(path="/" + quote(vhost, safe="")))


@pytest.mark.broker
async def test_rabbitmq_imports_the_file_and_the_worker_accepts_it() -> None:
    require_rabbitmqctl()
    vhost = f"test-defs-{uuid.uuid4().hex[:10]}"
    user = urlsplit(AMQP_URL).username or "guest"
    assert rabbitmqctl("add_vhost", vhost).returncode == 0
    try:
        granted = rabbitmqctl("set_permissions", "-p", vhost, user, ".*", ".*", ".*")
        assert granted.returncode == 0, granted.stderr
        # The same names, in the scratch vhost instead of "/".
        archive = topology.default_archive()
        defaults = (*topology.Topology().queue_names(), archive.stream)
        definitions = renamed(load(), {name: name for name in defaults}, vhost)
        # Debian's rabbitmqctl reads the file as the rabbitmq user: pytest's private
        # tmp_path is out of its reach, a world-readable file in the temp dir is not.
        fd, scratch = tempfile.mkstemp(prefix="prompt-worker-defs-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(definitions, handle)
        os.chmod(scratch, 0o644)
        try:
            imported = rabbitmqctl("import_definitions", "--format", "json", scratch)
        finally:
            os.unlink(scratch)
        assert imported.returncode == 0, imported.stdout + imported.stderr

        connection = await aio_pika.connect(url_for_vhost(vhost))
        async with connection:

            async def queues_exist() -> bool:
                # The import runs asynchronously after rabbitmqctl returns.
                channel = await connection.channel()
                try:
                    for queue in definitions["queues"]:
                        await channel.declare_queue(queue["name"], passive=True)
                except Exception:
                    return False
                return True

            await wait_for(queues_exist, 60, "the imported queues", interval=0.5)
            await declare_topology(await connection.channel(), topology.Topology())
            # The worker's declaration of the stream (worker.archive.recorder) too.
            await (await connection.channel()).declare_queue(
                archive.stream, durable=True, arguments=archive.arguments()
            )
        listed = rabbitmqctl("list_queues", "-p", vhost, "name", "type", "--no-table-headers")
        types = dict(line.split("\t") for line in listed.stdout.splitlines() if "\t" in line)
        quorum = {name: "quorum" for name in topology.Topology().queue_names()}
        assert types == {**quorum, archive.stream: "stream"}
    finally:
        rabbitmqctl("delete_vhost", vhost)
