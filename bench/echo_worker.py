"""The echo worker: the AMQP ceiling the real worker is measured against.

Everything `prompt-worker serve` does on the wire, nothing else: the same robust
connection, per-consumer prefetch, topology, manual ack after a publisher-confirmed
reply to `reply_to` with the correlation id. Per job it parses the body with orjson
(as the renderer's first step does) and replies with the request body itself, which for
the typical ReAct job is about the size of the real reply (21 KB vs 26 KB). No
rendering, no per-job log line, no metrics.

Settings come from the same PROMPT_WORKER_* variables as the real worker.

    PROMPT_WORKER_REQUEST_QUEUE=bench .venv/bin/python bench/echo_worker.py
"""

import asyncio
import os
import signal
import sys
from pathlib import Path

import aio_pika
import orjson
from aio_pika.abc import AbstractIncomingMessage

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.aio_pika_topology import declare_topology  # noqa: E402
from worker.transport.link.connection import connection_url  # noqa: E402
from worker.transport.settings import from_env  # noqa: E402


async def main() -> int:
    settings = from_env(os.environ)
    connection = await aio_pika.connect_robust(connection_url(settings.amqp_url))
    channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
    await channel.set_qos(prefetch_count=settings.prefetch, global_=False)
    declared = await declare_topology(channel, settings.topology)
    exchange = channel.default_exchange

    async def on_message(message: AbstractIncomingMessage) -> None:
        job = orjson.loads(message.body)
        await exchange.publish(
            aio_pika.Message(
                message.body,
                content_type="application/json",
                correlation_id=message.correlation_id or job.get("job_id"),
                delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            ),
            routing_key=message.reply_to or settings.reply_queue,
            mandatory=True,
        )
        await message.ack()

    tag = await declared.request_queue.consume(on_message)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await declared.request_queue.cancel(tag)
    await connection.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
