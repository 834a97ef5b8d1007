"""Reading an archive stream back in tests: every record, decompressed, with its
properties (the writer's wire format, worker/archive/record.py)."""

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

import aio_pika
import orjson
import zstandard
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage


@dataclass(frozen=True)
class ReadRecord:
    body: bytes  # as published (compressed)
    record: dict[str, Any]  # decompressed and parsed
    message: AbstractIncomingMessage


async def read_records(
    amqp_url: str, stream: str, at_least: int, within: float = 60.0
) -> list[ReadRecord]:
    """The stream's records from its first, once `at_least` have been read (or `within`
    seconds have passed, then what was read: the caller's assertion says what is
    missing)."""
    connection = await aio_pika.connect(amqp_url)
    records: list[ReadRecord] = []
    enough = asyncio.Event()
    decompressor = zstandard.ZstdDecompressor()
    async with connection:
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=500)
        queue = await channel.get_queue(stream, ensure=False)

        async def on_message(message: AbstractIncomingMessage) -> None:
            record = orjson.loads(decompressor.decompress(message.body))
            records.append(ReadRecord(message.body, record, message))
            await message.ack()
            if len(records) >= at_least:
                enough.set()

        tag = await queue.consume(on_message, arguments={"x-stream-offset": "first"})
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(enough.wait(), within)
        await queue.cancel(tag)
    return records


async def collect_job_ids(channel: AbstractChannel, reply_queue: str) -> list[str]:
    """Consume `reply_queue`: the list returned grows by each reply's job id, in the
    order the replies arrive (each acknowledged)."""
    answered: list[str] = []

    async def on_reply(message: AbstractIncomingMessage) -> None:
        answered.append(orjson.loads(message.body)["job_id"])
        await message.ack()

    await (await channel.get_queue(reply_queue)).consume(on_reply)
    return answered
