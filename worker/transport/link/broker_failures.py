"""Why a connection to the broker failed, in the words an operator needs.

The client libraries report a failed connection as a tuple of an errno and a message
quoting the socket call, or as a protocol frame; an operator wants "where", "why" and
whether waiting can help. Every producer of the worker (`serve`, `replay-dead`,
`rerender --broker`, `PromptClient`) reports through these, so the same failure reads
the same everywhere. Never a credential: addresses are host and port only.
"""

import os

from aiormq.exceptions import (
    AMQPConnectionError,
    AuthenticationError,
    ConnectionClosed,
    InvalidFrameError,
    ProbableAuthenticationError,
)
from yarl import URL

from worker.transport.link.tls import refusal

ACCESS_REFUSED = "access refused: the broker rejected the user name or password"


def broker_address(amqp_url: str | URL) -> str:
    """`host:port` of the URL, without user, password, vhost or options."""
    url = URL(str(amqp_url))
    port = url.explicit_port or (5671 if url.scheme == "amqps" else 5672)
    host = url.raw_host or "localhost"
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    return f"{host}:{port}"


class ConnectFailed(Exception):
    """None of a list of broker addresses could be connected to (`connect_first`):
    `tried` are their `host:port`, in order, `last` the last attempt's error."""

    def __init__(self, tried: list[str], last: BaseException) -> None:
        super().__init__(f"no broker address could be connected to ({', '.join(tried)})")
        self.tried = tried
        self.last = last


def is_access_refused(exc: BaseException) -> bool:
    """Wrong user name or password (or an auth mechanism the broker lacks): retrying
    the same credentials can only fail again, so nobody should wait for it."""
    if isinstance(exc, ConnectFailed):
        exc = exc.last
    return isinstance(exc, ProbableAuthenticationError | AuthenticationError)


def describe(exc: BaseException) -> str:
    """One short line saying why the connection failed."""
    if isinstance(exc, ConnectFailed):
        exc = exc.last
    if is_access_refused(exc):
        return ACCESS_REFUSED
    tls_refused = refusal(exc)
    if tls_refused is not None:
        return tls_refused
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    if isinstance(exc, ConnectionClosed):
        # The broker's connection.close: a reply code (320 CONNECTION_FORCED on a
        # shutdown, 541 INTERNAL_ERROR, ...), never an errno, and the broker's words.
        said = " ".join(str(a) for a in exc.args if not isinstance(a, int) and a is not None)
        return f"the broker closed the connection: {said or 'no reason given'}"
    if isinstance(exc, AMQPConnectionError) and exc.args and isinstance(exc.args[0], int):
        # aiormq's (errno, "Connect call failed (...)"); resolver errors have errno < 0.
        code = exc.args[0]
        if code > 0:
            return os.strerror(code).lower()
        return str(exc.args[1]).lower() if len(exc.args) > 1 else f"error {code}"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    if isinstance(exc, InvalidFrameError) and "Connection.Close" in str(exc):
        # The broker hung up on Connection.Open: a virtual host that does not exist or
        # that the user may not use (the reason is only in the broker's log).
        return "the broker closed the connection while opening it (check the virtual host)"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def where_credentials_are(source: str | None) -> str:
    """Where an operator fixes credentials the broker refused, for a URL read from
    `source`: the flag or variable it came from (`Settings.source_of("amqp_url")`), or
    None for the built-in default."""
    if source is None:
        return "the default URL (guest); set --amqp-url or PROMPT_WORKER_AMQP_URL(_FILE)"
    if source.endswith(("_FILE", "-file")):
        return f"the file named by {source}"
    return source


def refused_detail(source: str | None) -> str:
    """The `detail` of serve's `broker_access_refused` line, for a URL read from
    `source` (`Settings.source_of("amqp_url")`)."""
    return f"not retried: fix the credentials in {where_credentials_are(source)}"


def connect_failure(where: str, exc: BaseException, *, fix_in: str | None = None) -> str:
    """The one-line message of a command that could not connect to the broker `where`.

    After several addresses (`ConnectFailed`), `where` is all of them, in the order tried.
    `fix_in` names where refused credentials are fixed (`where_credentials_are`).
    """
    if isinstance(exc, ConnectFailed):
        where, exc = ", ".join(exc.tried), exc.last
    if is_access_refused(exc):
        fix = f" in {fix_in}" if fix_in else ""
        return f"access refused by the broker at {where}: check the user name and password{fix}"
    return f"cannot reach the broker at {where}: {describe(exc)}"
