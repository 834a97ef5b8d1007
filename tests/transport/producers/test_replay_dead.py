"""`prompt-worker replay-dead` against the real broker, on uniquely named queues.

Dead letters are made the way production makes them: a job is published to a request
queue declared by `worker.transport.link.topology` and rejected without requeue, so RabbitMQ
dead-letters it with its own x-death header.
"""

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aio_pika
import orjson
import pytest
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage

from tests.aio_pika_topology import declare_topology
from tests.integration.helpers import (
    AMQP_URL,
    needs_broker,
    queue_depth,
    unique_topology,
    wait_for,
)
from worker import cli
from worker.transport.link import topology
from worker.transport.producers.replay import REPLAY_COUNT_HEADER, describe, replay_dead

# --- describing a dead letter (no broker) -------------------------------------------


def test_describe_reads_ids_and_the_latest_death() -> None:
    body = orjson.dumps({"job_id": "j-1", "kind": "native-thinking", "chat": {"x": 1}})
    headers: dict[str, Any] = {
        "x-death": [
            {"reason": b"delivery_limit", "queue": b"build-prompt", "count": 1},
            {"reason": "rejected", "queue": "build-prompt", "count": 3},
        ],
        REPLAY_COUNT_HEADER: 2,
    }
    letter = describe(body, headers)
    assert letter.job_id == "j-1"
    assert letter.kind == "native-thinking"
    assert letter.size == len(body)
    assert (letter.reason, letter.queue, letter.deaths) == ("delivery_limit", "build-prompt", 1)
    assert letter.replays == 2
    # What an operator sees never includes the payload itself.
    assert "chat" not in json.dumps(letter.as_dict())


@pytest.mark.parametrize(
    "body", [b"\xff\xfe not json", b"[1, 2]", b'{"job_id": 7, "kind": null}', b""]
)
def test_describe_never_fails_on_bad_bodies(body: bytes) -> None:
    letter = describe(body, None)
    assert (letter.job_id, letter.kind, letter.reason, letter.deaths) == (None, None, None, 0)
    assert letter.size == len(body)


# --- against the broker ---------------------------------------------------------------


@pytest.fixture
def topo() -> Iterator[topology.Topology]:
    yield from unique_topology("replay")


@pytest.fixture
async def channel(topo: topology.Topology) -> AsyncIterator[AbstractChannel]:
    connection = await aio_pika.connect(AMQP_URL)
    async with connection:
        ch = await connection.channel()
        await declare_topology(ch, topo)
        yield ch


def job(job_id: str, kind: str = "react") -> bytes:
    return orjson.dumps({"job_id": job_id, "kind": kind, "session": {"alert_data": "x" * 50}})


async def dead_letter(
    channel: AbstractChannel, topo: topology.Topology, bodies: list[bytes]
) -> None:
    """Publish each body as a job, then reject it without requeue, as the worker does."""
    for i, body in enumerate(bodies):
        await channel.default_exchange.publish(
            aio_pika.Message(
                body,
                content_type="application/json",
                correlation_id=f"corr-{i}",
                reply_to="some-client-queue",
                headers={"tenant": "t1"},
            ),
            routing_key=topo.request_queue,
        )
    requests = await channel.get_queue(topo.request_queue, ensure=False)
    for _ in bodies:
        message = await requests.get(no_ack=False, timeout=10)
        await message.reject(requeue=False)
    await wait_until_depth(channel, topo.dead_letter_queue, len(bodies))


async def wait_until_depth(channel: AbstractChannel, queue: str, depth: int) -> None:
    async def reached() -> bool:
        return await queue_depth(channel, queue) == depth

    await wait_for(reached, 30, f"{queue} to hold {depth} messages")


async def take_all(channel: AbstractChannel, queue_name: str) -> list[AbstractIncomingMessage]:
    queue = await channel.get_queue(queue_name, ensure=False)
    taken = []
    while (message := await queue.get(no_ack=False, fail=False)) is not None:
        await message.ack()
        taken.append(message)
    return taken


@needs_broker
async def test_dry_run_lists_and_moves_nothing(
    channel: AbstractChannel, topo: topology.Topology
) -> None:
    bodies = [job("a-1"), job("a-2", "synthesis"), b"{not json"]
    await dead_letter(channel, topo, bodies)

    result = await replay_dead(AMQP_URL, topo.dead_letter_queue, topo.request_queue, dry_run=True)

    assert (result.matched, result.replayed, result.error) == (3, 0, None)
    letters = [letter for _, letter in result.letters]
    assert [letter.job_id for letter in letters] == ["a-1", "a-2", None]
    assert [letter.kind for letter in letters] == ["react", "synthesis", None]
    assert [letter.size for letter in letters] == [len(body) for body in bodies]
    assert {letter.reason for letter in letters} == {"rejected"}
    assert {letter.queue for letter in letters} == {topo.request_queue}
    await wait_until_depth(channel, topo.dead_letter_queue, 3)
    await wait_until_depth(channel, topo.request_queue, 0)


@needs_broker
async def test_replay_moves_every_job_unchanged(
    channel: AbstractChannel, topo: topology.Topology
) -> None:
    bodies = [job("b-1"), job("b-2"), b"{not json"]
    await dead_letter(channel, topo, bodies)

    result = await replay_dead(AMQP_URL, topo.dead_letter_queue, topo.request_queue)

    assert (result.replayed, result.error) == (3, None)
    await wait_until_depth(channel, topo.dead_letter_queue, 0)
    replayed = await take_all(channel, topo.request_queue)
    assert [m.body for m in replayed] == bodies
    for i, message in enumerate(replayed):
        assert message.correlation_id == f"corr-{i}"
        assert message.reply_to == "some-client-queue"
        assert message.content_type == "application/json"
        assert message.delivery_mode == aio_pika.DeliveryMode.PERSISTENT
        headers = message.headers or {}
        assert headers["tenant"] == "t1"
        assert headers[REPLAY_COUNT_HEADER] == 1
        assert "x-death" not in headers


@needs_broker
async def test_limit_and_kind_filter(channel: AbstractChannel, topo: topology.Topology) -> None:
    kinds = ["react", "synthesis-native-thinking", "react", "synthesis", "react"]
    await dead_letter(channel, topo, [job(f"c-{i}", kind) for i, kind in enumerate(kinds)])

    first = await replay_dead(
        AMQP_URL, topo.dead_letter_queue, topo.request_queue, limit=1, kind="synthesis"
    )
    # The TARSy spelling is the same kind.
    assert [(a, letter.job_id) for a, letter in first.letters] == [
        ("skipped", "c-0"),
        ("replayed", "c-1"),
    ]
    # The first run handed its skipped letter back (a nack a quorum queue settles a
    # moment later): the next run counts what is present when it starts.
    await wait_until_depth(channel, topo.dead_letter_queue, 4)
    rest = await replay_dead(AMQP_URL, topo.dead_letter_queue, topo.request_queue, kind="synthesis")
    assert [letter.job_id for a, letter in rest.letters if a == "replayed"] == ["c-3"]
    assert rest.skipped == 3
    await wait_until_depth(channel, topo.dead_letter_queue, 3)
    moved = await take_all(channel, topo.request_queue)
    assert [orjson.loads(m.body)["job_id"] for m in moved] == ["c-1", "c-3"]

    limited = await replay_dead(AMQP_URL, topo.dead_letter_queue, topo.request_queue, limit=2)
    assert limited.replayed == 2
    await wait_until_depth(channel, topo.dead_letter_queue, 1)


@needs_broker
async def test_a_refused_publish_keeps_the_dead_copy(
    channel: AbstractChannel, topo: topology.Topology
) -> None:
    await dead_letter(channel, topo, [job(f"d-{i}") for i in range(3)])
    # A target that takes one job and then refuses (nacks) every publish.
    full = f"{topo.request_queue}.full"
    await channel.declare_queue(
        full, durable=True, arguments={"x-max-length": 1, "x-overflow": "reject-publish"}
    )
    try:
        result = await replay_dead(AMQP_URL, topo.dead_letter_queue, full)
        assert result.replayed == 1
        assert result.error is not None and "d-1" in result.error
        # Nothing lost: one moved, the refused one and the untouched one still dead.
        await wait_until_depth(channel, full, 1)
        await wait_until_depth(channel, topo.dead_letter_queue, 2)
    finally:
        await channel.queue_delete(full)


@needs_broker
async def test_a_job_that_dies_again_is_not_replayed_twice(
    channel: AbstractChannel, topo: topology.Topology
) -> None:
    await dead_letter(channel, topo, [job(f"e-{i}") for i in range(4)])
    # A worker that still rejects everything: each replayed job comes straight back.
    rejecting = await channel.get_queue(topo.request_queue, ensure=False)

    async def reject(message: AbstractIncomingMessage) -> None:
        await message.reject(requeue=False)

    tag = await rejecting.consume(reject)
    try:
        result = await asyncio.wait_for(
            replay_dead(AMQP_URL, topo.dead_letter_queue, topo.request_queue), timeout=60
        )
    finally:
        await rejecting.cancel(tag)
    assert result.replayed == 4
    assert result.examined == 4
    await wait_until_depth(channel, topo.dead_letter_queue, 4)


# --- the command ------------------------------------------------------------------


def run_command(*argv: str) -> int:
    return cli.main(["replay-dead", *argv])


@needs_broker
async def test_command_uses_serve_settings_and_prints_no_payload(
    channel: AbstractChannel,
    topo: topology.Topology,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await dead_letter(channel, topo, [job("f-1"), job("f-2", "synthesis")])
    monkeypatch.setenv("PROMPT_WORKER_AMQP_URL", AMQP_URL)
    monkeypatch.setenv("PROMPT_WORKER_DEAD_LETTER_QUEUE", topo.dead_letter_queue)
    flags = ("--request-queue", topo.request_queue)

    # asyncio.run inside the command needs a thread without a running loop.
    code = await asyncio.to_thread(run_command, "--dry-run", "--json", *flags)
    assert code == 0
    out, err = capsys.readouterr()
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["action"], r["job_id"], r["reason"]) for r in rows] == [
        ("listed", "f-1", "rejected"),
        ("listed", "f-2", "rejected"),
    ]
    assert "x" * 50 not in out  # the payload (alert_data) is never printed
    assert "2 listed (dry run)" in err

    code = await asyncio.to_thread(run_command, "--filter-kind", "synthesis", *flags)
    assert code == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0].startswith("ACTION\tJOB_ID")
    assert "1 replayed" in err and "1 of other kinds left in place" in err
    await wait_until_depth(channel, topo.dead_letter_queue, 1)


@needs_broker
def test_command_exits_2_for_a_missing_queue(capsys: pytest.CaptureFixture[str]) -> None:
    missing = f"test-replay-missing-{uuid.uuid4().hex[:8]}"
    code = run_command("--amqp-url", AMQP_URL, "--dead-letter-queue", missing)
    assert code == 2
    assert f"queue {missing!r} does not exist" in capsys.readouterr().err


def test_command_exits_2_for_bad_settings(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_command("--amqp-url", "http://not-amqp") == 2
    assert "--amqp-url" in capsys.readouterr().err
