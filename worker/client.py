"""`PromptClient`: the async RPC client for producers and tests.

    async with PromptClient(url, request_queue="build-prompt") as client:
        reply = await client.build(job, timeout=10)

Each client owns one connection, one channel with publisher confirms and an exclusive,
server-named reply queue. Any number of calls may be in flight at once on it: every
call has its own correlation id and waits on its own future. Replies are returned as
plain dicts (the JSON of SPEC §3, parsed with orjson): the cheapest form for the hot
path and for comparisons in tests; pass one to `schemas.reply.parse_reply` for the typed
models. The worker delivers at least once, so a reply can arrive twice; the second copy
finds no waiting call and is dropped.

A request is only ever sent once by the client. If a reply does not come within the
timeout, `PromptTimeout` is raised; the job may still be answered later (into a reply
queue nobody reads once the client is closed).
"""

import asyncio
import uuid
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import aio_pika
import orjson
from aio_pika.abc import (
    AbstractChannel,
    AbstractConnection,
    AbstractIncomingMessage,
    AbstractQueue,
)
from aiormq.exceptions import DeliveryError, PublishError

from worker.topology import DEFAULT_REQUEST_QUEUE

DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/"
DEFAULT_TIMEOUT = 30.0


class PromptClientError(Exception):
    """The request could not be published or its reply could not be received."""


class PromptTimeout(PromptClientError, TimeoutError):
    """No reply within the timeout."""

    def __init__(self, job_id: str | None, correlation_id: str, timeout: float, queue: str):
        self.job_id = job_id
        self.correlation_id = correlation_id
        self.timeout = timeout
        super().__init__(
            f"no reply to job {job_id!r} (correlation id {correlation_id}) from queue "
            f"{queue!r} within {timeout:g} s; is a worker consuming it?"
        )


class PromptClient:
    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        request_queue: str = DEFAULT_REQUEST_QUEUE,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.url = url
        self.request_queue = request_queue
        self.timeout = timeout
        self._connection: AbstractConnection | None = None
        self._channel: AbstractChannel | None = None
        self._reply_queue: AbstractQueue | None = None
        self._pending: dict[str, asyncio.Future[bytes]] = {}
        self.unmatched_replies = 0

    async def __aenter__(self) -> "PromptClient":
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def open(self) -> None:
        # A plain connection, not a robust one: the exclusive reply queue dies with it,
        # so after a reconnect no reply to an earlier call could arrive anyway. Losing
        # the connection fails the pending calls at once instead.
        self._connection = await aio_pika.connect(self.url)
        self._connection.close_callbacks.add(self._on_connection_closed)
        # on_return_raises: publishing to a request queue that does not exist is an
        # error, not a silent drop.
        self._channel = await self._connection.channel(
            publisher_confirms=True, on_return_raises=True
        )
        self._reply_queue = await self._channel.declare_queue("", exclusive=True, auto_delete=True)
        await self._reply_queue.consume(self._on_reply, no_ack=True)

    async def close(self) -> None:
        self._fail_pending(PromptClientError("client closed"))
        if self._connection is not None:
            await self._connection.close()
            self._connection = None

    @property
    def reply_queue(self) -> str:
        if self._reply_queue is None:
            raise PromptClientError("client is not open")
        return self._reply_queue.name

    def _on_connection_closed(self, _: Any, exc: BaseException | None = None) -> None:
        self._fail_pending(PromptClientError(f"connection to the broker lost: {exc!r}"))

    def _fail_pending(self, error: Exception) -> None:
        for future in self._pending.values():
            if not future.done():
                future.set_exception(error)
        self._pending.clear()

    async def _on_reply(self, message: AbstractIncomingMessage) -> None:
        future = self._pending.pop(message.correlation_id or "", None)
        if future is None or future.done():
            self.unmatched_replies += 1
            return
        future.set_result(message.body)

    async def build(
        self,
        job: Mapping[str, Any],
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the documented call style
        correlation_id: str | None = None,
    ) -> dict[str, Any]:
        """Render `job` through the worker; the reply as a dict (ok or error)."""
        job_id = job.get("job_id")
        return await self.build_bytes(
            orjson.dumps(job),
            timeout=timeout,
            correlation_id=correlation_id,
            job_id=job_id if isinstance(job_id, str) else None,
        )

    async def build_bytes(
        self,
        body: bytes,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the documented call style
        correlation_id: str | None = None,
        job_id: str | None = None,
    ) -> dict[str, Any]:
        """Send `body` as is (e.g. invalid JSON, for tests); the parsed reply."""
        reply: dict[str, Any] = orjson.loads(
            await self.call(body, timeout=timeout, correlation_id=correlation_id, job_id=job_id)
        )
        return reply

    async def call(
        self,
        body: bytes,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the documented call style
        correlation_id: str | None = None,
        job_id: str | None = None,
    ) -> bytes:
        """Publish `body` with reply_to set; the raw reply body."""
        if self._channel is None or self._reply_queue is None:
            raise PromptClientError("client is not open: use `async with PromptClient(...)`")
        correlation_id = correlation_id or uuid.uuid4().hex
        if correlation_id in self._pending:
            raise PromptClientError(f"correlation id {correlation_id!r} is already waiting")
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = future
        wait = self.timeout if timeout is None else timeout
        try:
            try:
                await self._channel.default_exchange.publish(
                    aio_pika.Message(
                        body,
                        content_type="application/json",
                        correlation_id=correlation_id,
                        reply_to=self._reply_queue.name,
                        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                    ),
                    routing_key=self.request_queue,
                    mandatory=True,
                )
            except PublishError as exc:
                raise PromptClientError(
                    f"request queue {self.request_queue!r} does not exist"
                ) from exc
            except DeliveryError as exc:
                raise PromptClientError(
                    f"the broker refused the job (request queue {self.request_queue!r} full?)"
                ) from exc
            try:
                return await asyncio.wait_for(asyncio.shield(future), wait)
            except TimeoutError:
                raise PromptTimeout(job_id, correlation_id, wait, self.request_queue) from None
        finally:
            self._pending.pop(correlation_id, None)
