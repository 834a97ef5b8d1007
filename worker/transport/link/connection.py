"""The worker's way to the broker: which address to try, how long to wait, what to say.

`BrokerLink` makes one aiormq connection at a time and owns every decision about it:

* several addresses (a cluster's nodes): each attempt goes to the current one; a failed
  attempt or a lost link moves on to the next, round the list. One backoff spans them
  all, so a cluster down as a whole is not hammered node by node;
* exponential backoff from the URL's `reconnect_interval` up to
  `RECONNECT_BACKOFF_CAP`, with jitter so that a fleet does not reconnect in lockstep
  after a broker restart (`worker.transport.retry`), reset once the worker consumes
  again;
* one worker line per failed attempt: `broker_unreachable` with `broker` (host:port,
  never a credential), `next_broker` (where the next attempt goes), `error` (why, in
  words), `attempt` and `retry_in_s`; `broker_restore_refused`, with the same fields,
  for an attempt that connected but whose channel or topology the broker refused (say,
  a virtual host's queue limit): the broker is reachable, and `broker_unreachable` would
  send an operator to the wrong place;
* wrong credentials (ACCESS_REFUSED) are not retried: one `broker_access_refused` line,
  and `AccessRefused` ends the worker with exit status 2.

The failures are aiormq's own exceptions, raised by the attempt itself; nothing is read
from the library's log. Each connection is followed by `flow.BrokerFlow` for the
broker's blocks (`worker.transport.link.flow`) and, through the socket it is opened on
(`socket_watch.WatchedTransport`), cut when the broker stays silent too long.
"""

import asyncio
import contextlib
import ssl
from typing import Any

import aiormq
from aiormq.abc import AbstractConnection
from aiormq.exceptions import ChannelClosed
from structlog.typing import FilteringBoundLogger
from yarl import URL

from worker.transport.link.addresses import split_addresses
from worker.transport.link.broker_failures import (
    broker_address,
    describe,
    is_access_refused,
    refused_detail,
)
from worker.transport.link.flow import BrokerFlow
from worker.transport.link.socket_watch import WatchedTransport, cut_when_silent
from worker.transport.retry import Backoff

# aio-pika's default was 5 s between reconnect attempts; a worker is worth more sooner.
DEFAULT_RECONNECT_INTERVAL = "2"
# One attempt (TCP, TLS and AMQP handshakes) that takes longer than this has failed:
# an address that swallows packets must not hold the worker on one node for ever.
CONNECT_TIMEOUT = 30.0
# Every call that waits for the broker's answer (a channel, a declaration, QoS, a
# consumer) gives up after this long: aiormq then closes the channel, and the link's
# loop opens another. Replies' confirms are not bounded by it: during a resource alarm
# they wait, by design, for as long as the alarm lasts (the heartbeat still tells a
# broker that is gone).
BROKER_CALL_TIMEOUT = 30.0


class AccessRefused(Exception):
    """The broker refused the credentials: retrying cannot help (already logged)."""


def connection_url(amqp_url: str) -> URL:
    """The URL with the worker's connection defaults, unless the URL sets them itself.

    `reconnect_interval` is the first pause of the backoff; `fail_fast=false` is for
    aio-pika users of the same URL (bench's echo worker): the worker itself always
    starts before the broker if need be (it keeps retrying, not ready).
    """
    url = URL(amqp_url)
    defaults = {"fail_fast": "false", "reconnect_interval": DEFAULT_RECONNECT_INTERVAL}
    missing = {k: v for k, v in defaults.items() if k not in url.query}
    return url.update_query(missing) if missing else url


def connection_urls(amqp_url: str) -> list[URL]:
    """`connection_url` of each address of the setting (one, or a cluster's nodes)."""
    return [connection_url(address) for address in split_addresses(amqp_url)]


def first_pause(url: URL) -> float:
    try:
        return float(url.query.get("reconnect_interval", DEFAULT_RECONNECT_INTERVAL))
    except ValueError:
        return float(DEFAULT_RECONNECT_INTERVAL)


class BrokerLink:
    """Connections over the worker's addresses, with one backoff and one line per
    failed attempt."""

    def __init__(
        self,
        urls: list[URL],
        *,
        log: FilteringBoundLogger,
        flow: BrokerFlow,
        client_properties: dict[str, Any] | None = None,
        ssl_context: ssl.SSLContext | None = None,
        refused_hint: str | None = None,
    ) -> None:
        self.urls = list(urls)
        # What a refusal of the credentials says to do, naming the setting they came from.
        self.refused_hint = refused_hint or refused_detail(None)
        self.current = 0
        self.backoff = Backoff(first_pause(self.urls[0]))
        self.log = log
        self.flow = flow
        self.client_properties = client_properties or {}
        self.ssl_context = ssl_context

    @property
    def broker(self) -> str:
        """`host:port` of the node in use (or tried next), never a credential."""
        return broker_address(self.urls[self.current])

    def move_on(self) -> str:
        """Go to the next address (after a lost link or a failed attempt); the one left."""
        left = self.broker
        self.current = (self.current + 1) % len(self.urls)
        return left

    async def connect(self) -> AbstractConnection:
        """A connection to the first address that takes one, trying round the list with
        the backoff's pauses. Raises `AccessRefused` on wrong credentials."""
        while True:
            try:
                return await self.attempt()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                await self.attempt_failed(exc)

    async def attempt(self) -> AbstractConnection:
        """One attempt at the current address; raises why it failed."""
        transport = WatchedTransport()
        connection = aiormq.Connection(
            self.urls[self.current],
            context=self.ssl_context,
            transport_factory=transport,
            client_properties=self.client_properties,
        )
        try:
            await asyncio.wait_for(connection.connect(), CONNECT_TIMEOUT)
        except BaseException:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(connection.close(), 5)
            raise
        # Both end with the connection (whichever way it ends).
        watches = [
            self.flow.watch(connection),
            asyncio.get_running_loop().create_task(
                cut_when_silent(transport.socket, float(connection.heartbeat_timeout), self.silent)
            ),
        ]
        connection.closing.add_done_callback(lambda _: [watch.cancel() for watch in watches])
        return connection

    def silent(self, seconds: float) -> None:
        """The broker sent nothing for `seconds`: the connection is about to cut the link."""
        self.log.warning("broker_link_silent", broker=self.broker, silent_s=round(seconds, 1))

    async def attempt_failed(self, exc: BaseException) -> None:
        """One attempt failed with `exc`: log it, move on, and wait the next pause (or
        raise `AccessRefused`)."""
        tried = self.move_on()
        if is_access_refused(exc):
            self.log.error(
                "broker_access_refused",
                broker=tried,
                error=describe(exc),
                detail=self.refused_hint,
            )
            raise AccessRefused(describe(exc)) from exc
        await self.pause("broker_unreachable", tried, exc)

    async def restore_refused(self, exc: BaseException, **fields: str) -> None:
        """The connection was made but the broker refused the channel or topology on it
        (`exc`): log it and wait the next pause; the next attempt stays on this node."""
        event = "broker_restore_refused" if isinstance(exc, ChannelClosed) else "broker_link_down"
        await self.pause(event, self.broker, exc, **fields)

    async def pause(self, event: str, tried: str, exc: BaseException, **fields: str) -> None:
        pause = self.backoff.next()
        self.log.warning(
            event,
            broker=tried,
            next_broker=self.broker,
            error=describe(exc),
            attempt=self.backoff.failures,
            retry_in_s=pause,
            **fields,
        )
        await asyncio.sleep(pause)
