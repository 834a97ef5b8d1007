"""The producers' link while its reply queue is being consumed again, against a scripted
broker that holds the re-declaration: no job goes out naming a queue that may not exist
yet, and once the queue is back the owner is told and the job goes."""

import asyncio
from typing import Any

import pytest
from pamqp import commands

from tests.transport.link.scripted_broker import ScriptedBroker, Session
from worker.transport.producers.rpc import LinkDown, RpcLink

# What aiormq reads of a broker's properties: its capabilities, as RabbitMQ announces them.
RABBITMQ_LIKE = {
    "product": "scripted",
    "capabilities": {
        "publisher_confirms": True,
        "consumer_cancel_notify": True,
        "basic.nack": True,
    },
}


async def method(session: Session, kind: type) -> tuple[int, Any]:
    """The next frame of type `kind`, skipping heartbeats and anything else."""
    while True:
        channel, frame = await session.read()
        if isinstance(frame, kind):
            return channel, frame


class HeldRedeclaration:
    """Opens the link's channel and consumer; when `cancel` is set (`at_once`: in the same
    write as the consume-ok), cancels the consumer as RabbitMQ does when the queue is
    deleted, then holds the queue's re-declaration until `release` is set; confirms the
    publish that follows."""

    def __init__(self, at_once: bool) -> None:
        self.cancel = asyncio.Event()
        if at_once:
            self.cancel.set()
        self.redeclared = asyncio.Event()
        self.release = asyncio.Event()
        self.published: list[Any] = []

    async def __call__(self, session: Session) -> None:
        number, _ = await method(session, commands.Channel.Open)
        session.send(commands.Channel.OpenOk(), number)
        await method(session, commands.Confirm.Select)
        session.send(commands.Confirm.SelectOk(), number)
        await method(session, commands.Queue.Declare)
        session.send(commands.Queue.DeclareOk("replies", 0, 0), number)
        _, consume = await method(session, commands.Basic.Consume)
        session.send(commands.Basic.ConsumeOk(consume.consumer_tag or "tag-1"), number)
        await self.cancel.wait()
        session.send(commands.Basic.Cancel(consume.consumer_tag or "tag-1", nowait=True), number)
        await method(session, commands.Queue.Declare)
        self.redeclared.set()
        await self.release.wait()
        session.send(commands.Queue.DeclareOk("replies", 0, 0), number)
        _, consume = await method(session, commands.Basic.Consume)
        session.send(commands.Basic.ConsumeOk(consume.consumer_tag or "tag-2"), number)
        _, publish = await method(session, commands.Basic.Publish)
        self.published.append(publish)
        session.send(commands.Basic.Ack(1), number)
        await session.reader.read()  # until the link closes


@pytest.mark.parametrize("at_once", [False, True], ids=["later", "with-the-consume-ok"])
async def test_no_job_is_published_until_the_reply_queue_is_consumed_again(at_once: bool) -> None:
    script = HeldRedeclaration(at_once)
    resumed = asyncio.Event()
    async with ScriptedBroker(after=script, server_properties=RABBITMQ_LIKE) as broker:
        link = RpcLink(str(broker.url()), "requests", "replies", lambda *_: None,
                       on_resumed=resumed.set)  # fmt: skip
        await asyncio.wait_for(link.open(), 10)
        try:
            script.cancel.set()
            await asyncio.wait_for(script.redeclared.wait(), 10)
            with pytest.raises(LinkDown):
                await asyncio.wait_for(link.publish(b"{}", "call-1"), 10)
            assert not resumed.is_set()
            script.release.set()
            await asyncio.wait_for(resumed.wait(), 10)
            await asyncio.wait_for(link.publish(b"{}", "call-1"), 10)
        finally:
            await link.close()
    [publish] = script.published
    assert publish.routing_key == "requests"
