"""`PromptClient`: the async RPC client for producers and tests.

    async with PromptClient(url, request_queue="build-prompt") as client:
        reply = await client.build(job, timeout=10)

Each client owns one connection, one channel with publisher confirms and an exclusive
reply queue (the RPC core it shares with `rerender --broker`: transport/producers/rpc.py). Any number of calls may be in flight at once on it: every
call has its own correlation id and waits on its own future. Replies are returned as
plain dicts (the JSON of CONTRACT.md §3, parsed with orjson): the cheapest form for the hot
path and for comparisons in tests; pass one to `schemas.reply.parse_reply` for the typed
models. The worker delivers at least once, so a reply can arrive twice; the second copy
finds no waiting call and is dropped.

`url` may list a cluster's nodes, comma-separated: the client connects to the first
that answers. For `amqps://` URLs, `tls` names the CA file the broker's certificate
must chain to and the client certificate and key for mutual TLS (`transport/link/tls.py`,
shared with the worker); a broker certificate that fails verification raises
`PromptClientError` saying so.

The link keeps itself up (transport/producers/rpc.py). If the connection drops, the client
reconnects, moving round the addresses from the next node on, with growing jittered
pauses between failed attempts (the first from the URL's `reconnect_interval`, 1 s
if none); the reply queue (under a new name on the new connection: `reply_queue`) and
its consumer are restored and every call still waiting is published again, naming it:
a reply the worker sent while the client was away had nowhere to go. The same happens
when the reply queue is deleted under a connected client: it is declared again, and
what is waiting published again. Calls keep waiting through the outage, bounded by
their timeout. Refused credentials on a reconnect fail every waiting call, and every
later one, with `PromptAccessRefused`. A job the broker
refuses outright (above its `max_message_size`) closes the channel: the call fails at
once with the broker's reason, and the client goes on. If no reply comes within the
timeout, `PromptTimeout` is raised; the job may still be answered later, into a reply
queue nobody reads once the client is closed.
"""

import asyncio
import contextlib
import os
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import orjson
from aiormq.exceptions import AMQPError, ChannelClosed, DeliveryError, PublishError
from yarl import URL

from worker.transport.link import tls as broker_tls
from worker.transport.link.addresses import SEPARATOR
from worker.transport.link.broker_failures import (
    ConnectFailed,
    broker_address,
    connect_failure,
    is_access_refused,
)
from worker.transport.link.topology import DEFAULT_REQUEST_QUEUE
from worker.transport.producers.rpc import RpcLink
from worker.transport.producers.trace_context import caller_context_headers

DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/"
DEFAULT_TIMEOUT = 30.0


class PromptClientError(Exception):
    """The request could not be published or its reply could not be received."""


class PromptBrokerUnreachable(PromptClientError, ConnectionError):
    """The client could not connect to the broker (the message says where and why)."""


class PromptAccessRefused(PromptBrokerUnreachable):
    """The broker refused the user name or password (ACCESS_REFUSED): retrying with the
    same URL cannot help."""


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
        tls: broker_tls.TlsFiles | None = None,
    ) -> None:
        self.url = url
        self.tls = tls
        self.request_queue = request_queue
        self.timeout = timeout
        self._link: RpcLink | None = None
        self._pending: dict[str, _Call] = {}
        # The round of re-sends under way, if any (one at a time: `_resend_all`).
        self._resending: asyncio.Future[None] | None = None
        # Set once the link gave up: what every call raises from then on.
        self._failure: PromptClientError | None = None
        self.unmatched_replies = 0
        self.resent = 0

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
        urls = [URL(address) for address in self.url.split(SEPARATOR)]
        # Named by the client, not by the broker, so that the queue declared again on a
        # channel of the same connection (after the broker closed one, or the queue was
        # deleted) has the same name and requests already out keep their reply_to. A new
        # connection adds its number to it (transport/producers/rpc.py).
        name = f"prompt-client.{socket.gethostname()}.{os.getpid()}.{uuid.uuid4().hex[:12]}"
        link = RpcLink(
            self.url,
            self.request_queue,
            name,
            self._on_reply,
            connect_kwargs=broker_tls.connect_kwargs(urls[0], self.tls),
            on_resumed=self._resend_pending,
            on_failed=self._link_failed,
        )
        # Opening fails at once when no address answers.
        try:
            await link.open()
        except (OSError, AMQPError, TimeoutError, ConnectFailed) as exc:
            with contextlib.suppress(Exception):
                await link.close()
            error = PromptAccessRefused if is_access_refused(exc) else PromptBrokerUnreachable
            raise error(connect_failure(broker_address(urls[0]), exc)) from exc
        self._link = link

    @property
    def broker(self) -> str | None:
        """`host:port` of the node the client is connected to; None while it reconnects."""
        return None if self._link is None else self._link.broker

    def _link_failed(self, exc: BaseException) -> None:
        """The link gave up (refused credentials on a reconnect): nothing can succeed."""
        where = self._link.address if self._link is not None else self.url
        error = PromptAccessRefused if is_access_refused(exc) else PromptBrokerUnreachable
        self._failure = error(connect_failure(where, exc))
        self._fail_pending(self._failure)

    async def close(self) -> None:
        self._fail_pending(PromptClientError("client closed"))
        if self._resending is not None:
            self._resending.cancel()
        link, self._link = self._link, None
        if link is not None:
            await link.close()

    @property
    def reply_queue(self) -> str:
        if self._link is None:
            raise PromptClientError("client is not open")
        return self._link.reply_queue

    def _resend_pending(self) -> None:
        """The reply consumer is back (a reconnect, a re-declared reply queue): replies
        sent while it was away went nowhere, so every waiting call is published again."""
        if self._resending is not None:
            self._resending.cancel()  # a round the link's loss interrupted
        self._resending = asyncio.ensure_future(self._resend_all())

    async def _resend_all(self) -> None:
        # One at a time: a job the broker refuses outright closes the channel under every
        # publish in flight with it, and only the refused one must fail. The calls after
        # it wait for the channel's restore, which starts another round.
        for correlation_id, call in list(self._pending.items()):
            if call.future.done():
                continue
            try:
                await self._publish(call.body, correlation_id, call.headers)
            except (PromptClientError, ChannelClosed) as exc:  # the broker refused it
                if not call.future.done():
                    call.future.set_exception(
                        PromptClientError(f"could not re-send job {call.job_id!r}: {exc!r}")
                    )
                if isinstance(exc, ChannelClosed) or self._failure is not None:
                    return  # the channel's restore starts the next round
                continue  # returned or nacked: the channel is still open for the rest
            except Exception:  # the link went again (LinkDown): its return starts another round
                return
            self.resent += 1

    def _fail_pending(self, error: Exception) -> None:
        for call in self._pending.values():
            if not call.future.done():
                call.future.set_exception(error)
        self._pending.clear()

    def _on_reply(self, correlation_id: str | None, body: bytes) -> None:
        call = self._pending.pop(correlation_id or "", None)
        if call is None or call.future.done():
            self.unmatched_replies += 1
            return
        call.future.set_result(body)

    async def _publish(
        self, body: bytes, correlation_id: str, headers: dict[str, str] | None = None
    ) -> None:
        if self._link is None:
            raise PromptClientError("client closed")
        if self._failure is not None:
            raise self._failure
        try:
            await self._link.publish(body, correlation_id, headers=headers)
        except PublishError as exc:
            raise PromptClientError(f"request queue {self.request_queue!r} does not exist") from exc
        except DeliveryError as exc:
            raise PromptClientError(
                f"the broker refused the job (request queue {self.request_queue!r} full?)"
            ) from exc

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
        if self._link is None:
            raise PromptClientError("client is not open: use `async with PromptClient(...)`")
        correlation_id = correlation_id or uuid.uuid4().hex
        if correlation_id in self._pending:
            raise PromptClientError(f"correlation id {correlation_id!r} is already waiting")
        call = _Call(
            body, job_id, asyncio.get_running_loop().create_future(), caller_context_headers()
        )
        self._pending[correlation_id] = call
        wait = self.timeout if timeout is None else timeout
        try:
            async with asyncio.timeout(wait):
                try:
                    await self._publish(body, correlation_id, call.headers)
                except PromptClientError:
                    raise
                except Exception:
                    # The link went under the publish (or was already down): whether
                    # the broker got the job is unknown, so the link's return publishes
                    # it again, one call at a time (duplicates are dropped here by
                    # correlation id). A job the broker refuses outright fails then,
                    # alone, rather than every call in flight with it.
                    if self._link is None:
                        raise
                return await asyncio.shield(call.future)
        except TimeoutError:
            raise PromptTimeout(job_id, correlation_id, wait, self.request_queue) from None
        finally:
            self._pending.pop(correlation_id, None)
            # A call that ended without its reply (timed out, cancelled) leaves nobody
            # awaiting the future: a re-send still in flight that fails later must not
            # set an exception on it that asyncio would report as never retrieved.
            call.future.cancel()


@dataclass(slots=True)
class _Call:
    """A call waiting for its reply: what to re-send after a reconnect, and where to
    deliver the reply."""

    body: bytes
    job_id: str | None
    future: "asyncio.Future[bytes]"
    # The caller's trace context when it called, sent again with a re-send.
    headers: dict[str, str]
