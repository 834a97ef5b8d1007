"""The worker's broker connection: aio-pika's robust connection, retried with backoff and
reported in the worker's own words.

aio-pika retries a lost or refused connection every `reconnect_interval` seconds for
ever, and logs each attempt as two or three lines of its own (the URL with its query,
an errno tuple, at debug a traceback). For an operator this class makes that:

* one worker line per failed attempt: `broker_unreachable` with `broker` (host:port,
  never a credential), `next_broker` (where the next attempt goes), `error` (why, in
  words) and `retry_in_s`;
* several addresses (a cluster's nodes): after a lost link or a failed attempt the
  next one is used, round the list; one backoff spans them all, so a cluster down as
  a whole is not hammered node by node;
* exponential backoff from `reconnect_interval` up to `RECONNECT_BACKOFF_CAP`, with
  jitter so that a fleet does not reconnect in lockstep after a broker restart, reset
  once connected;
* wrong credentials (ACCESS_REFUSED) are not retried: one `broker_access_refused`
  line and `on_refused`, which stops the worker with exit status 2;
* an attempt that connected but whose channel the broker refused to restore (a channel
  error while declaring the topology again, say a virtual host's queue limit) is
  `broker_restore_refused`, with the same fields: the broker is reachable, and
  `broker_unreachable` would send an operator to the wrong place.

aio-pika only reports a failed attempt through its logger, so that is where this
module listens (`_AttemptLines`): the library's connection lines are taken over, the
other library lines pass through untouched. Should aio-pika reword them, its lines
would show again and the backoff stop growing: tests/integration/test_broker_failures.py
fails on either, so an upgrade cannot slip through.
"""

import logging
import random
from collections.abc import Callable
from typing import Any

from aiormq.exceptions import ChannelClosed
from structlog.typing import FilteringBoundLogger
from yarl import URL

from worker.transport.broker_failures import broker_address, describe, is_access_refused
from worker.transport.rotation import RotatingConnection

# Longest pause between two connection attempts.
RECONNECT_BACKOFF_CAP = 30.0
# Each pause is shortened by up to this fraction, at random.
JITTER = 0.2


class Backoff:
    """Pauses that double from `first` up to `cap`, each cut by up to `JITTER` at random."""

    def __init__(
        self,
        first: float,
        cap: float = RECONNECT_BACKOFF_CAP,
        uniform: Callable[[], float] = random.random,
    ) -> None:
        self.first = max(first, 0.1)
        self.cap = max(cap, self.first)
        self.failures = 0
        self._uniform = uniform

    def next(self) -> float:
        """The pause after one more failure."""
        # Bounded exponent: the cap is reached long before, and 2.0 ** n overflows.
        delay = min(self.cap, self.first * 2.0 ** min(self.failures, 32))
        self.failures += 1
        return round(delay * (1 - JITTER * self._uniform()), 1)

    def reset(self) -> None:
        self.failures = 0


class BrokerConnection(RotatingConnection):
    """A robust connection over the worker's addresses that backs off, logs one line per
    failed attempt and gives up on wrong credentials. `on_refused(reason)` runs once,
    on ACCESS_REFUSED."""

    def __init__(
        self,
        urls: list[URL],
        *,
        on_refused: Callable[[str], None],
        log: FilteringBoundLogger,
        **kw: Any,
    ) -> None:
        # Before the base class: it sets `reconnect_interval` from the first URL.
        self._backoff = Backoff(1.0)
        self._pause = 0.0
        super().__init__(urls, **kw)
        self.refused = False
        self._on_refused = on_refused
        self._log = log
        _AttemptLines.install()

    # aio-pika sleeps `reconnect_interval` after each failed attempt, reading it anew
    # every time: the property hands it the current pause of the backoff.
    @property
    def reconnect_interval(self) -> float:
        return self._pause

    @reconnect_interval.setter
    def reconnect_interval(self, value: float) -> None:
        # Set once by aio-pika from the URL (`reconnect_interval=`): the first pause.
        self._backoff = Backoff(float(value))
        self._pause = self._backoff.first

    async def _on_connected(self) -> None:
        await super()._on_connected()
        self._backoff.reset()
        self._pause = self._backoff.first
        self._tried = None

    def attempt_failed(self, exc: BaseException) -> None:
        """One connection attempt failed with `exc`: log it, pick the next pause and
        the next address."""
        tried = self._tried or self._link_url()
        self._rotate_from(tried)  # a no-op when the closed connection already moved on
        self._tried = None
        if is_access_refused(exc):
            self._pause = RECONNECT_BACKOFF_CAP  # while the worker stops
            if not self.refused:
                self.refused = True
                self._log.error(
                    "broker_access_refused",
                    broker=broker_address(tried),
                    error=describe(exc),
                    detail="not retried: fix the credentials in PROMPT_WORKER_AMQP_URL",
                )
                self._on_refused(describe(exc))
            return
        # One backoff for the whole connection, whichever node: a cluster that is down
        # as a whole is not hammered node by node.
        self._pause = self._backoff.next()
        self._log.warning(
            "broker_restore_refused" if isinstance(exc, ChannelClosed) else "broker_unreachable",
            broker=broker_address(tried),
            next_broker=self.broker,
            error=describe(exc),
            attempt=self._backoff.failures,
            retry_in_s=self._pause,
        )


# The library lines this module takes over: (logger, message template) -> where the
# exception is in the record's arguments (None: a line to drop, with nothing to take).
_TAKEN_OVER: dict[tuple[str, str], int | None] = {
    (
        "aio_pika.robust_connection",
        'Connection attempt to "%s" failed: %s. Reconnecting after %r seconds.',
    ): 1,
    (
        "aio_pika.robust_connection",
        "Reconnect attempt failed %s due to %s: %s. Retrying after %r seconds.",
    ): 2,
    ("aio_pika.robust_connection", "Connection to %s closed. Reconnecting after %r seconds."): None,
    ("aiormq.connection", "error when creating transport: %r"): None,
    ("aiormq.connection", "Cancelling cause reader exited abnormally"): None,
    (
        "aiormq.connection",
        'Unexpected connection close from remote "%s", '
        "Connection.Close(reply_code=%r, reply_text=%r)",
    ): None,
}
# A channel's close callbacks fail this way when its connection is already gone: part of
# the link loss the worker reports itself. Any other callback error passes.
_CALLBACK_ERROR = ("aio_pika.tools", "Callback %r error: %s: %s")
_GONE_WITH_THE_CONNECTION = "ChannelInvalidStateError"
# A channel lost while it was first being opened tries to restore itself at once, and
# finds its connection closed (RuntimeError "<Connection ...> closed").
_RESTORED_TOO_SOON = "RuntimeError"
# A channel the broker closed restores itself at once, through its close callback; the
# broker may refuse that too (a channel error). The worker reports the loss itself
# (`broker_link_down`, then `channel_not_restored`), so the library's error line for
# that callback only repeats it.
_RESTORE_CALLBACK = "RobustChannel._on_close"


def _channel_errors(cls: type[BaseException] = ChannelClosed) -> frozenset[str]:
    names = {cls.__name__}
    for sub in cls.__subclasses__():
        names |= _channel_errors(sub)
    return frozenset(names)


_CHANNEL_ERRORS = _channel_errors()


def _reported_by_the_worker(args: tuple[object, ...]) -> bool:
    if len(args) < 3:
        return False
    if args[1] == _GONE_WITH_THE_CONNECTION:
        return True
    if args[1] in _CHANNEL_ERRORS and _RESTORE_CALLBACK in repr(args[0]):
        return True
    return args[1] == _RESTORED_TOO_SOON and str(args[2]).endswith("> closed")


class _AttemptLines(logging.Filter):
    """Turns aio-pika's "connection attempt failed" records for a `BrokerConnection`
    into its one line (and its backoff), and drops the libraries' other lines about
    connecting and losing the connection, which the worker's own `broker_unreachable`
    and `broker_link_down` replace."""

    installed = False

    @classmethod
    def install(cls) -> None:
        if cls.installed:
            return
        cls.installed = True
        line_filter = cls()
        for name in {logger for logger, _ in (*_TAKEN_OVER, _CALLBACK_ERROR)}:
            logging.getLogger(name).addFilter(line_filter)
        # The attempt records are warnings: they must be made whatever the log level,
        # or neither the backoff nor the refusal would be seen.
        logging.getLogger("aio_pika.robust_connection").setLevel(logging.WARNING)

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.msg)
        args = record.args if isinstance(record.args, tuple) else ()
        if key == _CALLBACK_ERROR:
            return not _reported_by_the_worker(args)
        if key not in _TAKEN_OVER:
            return True
        position = _TAKEN_OVER[key]
        if position is not None and len(args) > position:
            connection, exc = args[0], args[position]
            if isinstance(connection, BrokerConnection) and isinstance(exc, BaseException):
                connection.attempt_failed(exc)
        return False
