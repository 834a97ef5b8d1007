"""A robust connection over several addresses (a cluster's nodes) that moves on to the
next one after a lost link or a failed attempt, round the list.

aio-pika's robust connection reconnects to the one URL it was given, for ever: a
producer whose node died would never reach the nodes still up. aio-pika connects to
`self.url` on every attempt (it reads the attribute anew each time), so rotating means
replacing it. It runs `_on_connection_close` both when a link is lost and when an
attempt fails (before it logs the failure), which is where the next address is taken;
tests/integration/test_client_failover.py fails should either stop being so.
"""

from typing import Any

import aio_pika
from yarl import URL

from worker.transport.broker_failures import broker_address


class RotatingConnection(aio_pika.RobustConnection):
    """`urls`: the addresses in the order to try them; the options (`reconnect_interval`,
    `fail_fast`, ...) are read from the first."""

    def __init__(self, urls: list[URL], **kw: Any) -> None:
        self._urls = list(urls)
        self._current = 0
        # The address the latest attempt or link was on, recorded before rotating:
        # aio-pika runs `_on_connection_close` before it logs a failed attempt.
        self._tried: URL | None = None
        super().__init__(self._urls[0], **kw)

    @property
    def broker(self) -> str:
        """`host:port` of the node in use (or tried next), never a credential."""
        return broker_address(self.url)

    def _rotate_from(self, tried: URL) -> None:
        """Move on to the next address, unless another event already moved past `tried`
        (a failed attempt is seen twice: as a closed connection, then as a log record)."""
        self._tried = tried
        # Compared as host:port: aiormq adds the default port to the URL it keeps.
        if broker_address(self.url) == broker_address(tried):
            self._current = (self._current + 1) % len(self._urls)
            self.url = self._urls[self._current]

    def _link_url(self) -> URL:
        """The address of the link just lost or the attempt just failed."""
        transport = self.transport
        if transport is not None:
            return URL(str(transport.connection.url))
        return self.url

    async def _on_connection_close(self, closing: Any) -> None:
        if not (self._close_called or self.is_closed):
            self._rotate_from(self._link_url())
        await super()._on_connection_close(closing)
