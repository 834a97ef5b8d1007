"""Broker addresses: one URL, or several (the nodes of a cluster), comma-separated.

`PROMPT_WORKER_AMQP_URL` (and `--broker`, `PromptClient`'s `url`) take
`amqp://u:p@node1:5672/,amqp://u:p@node2:5672/,...`: each item is a full URL, checked
on its own, so each node may have its own credentials and options. The worker uses
them in order and moves to the next one when its node is lost or cannot be reached
(`transport/link/connection.py`); one-shot commands try them in order (`connect_first`).

The value holds passwords: error messages say which item is wrong and why, never quote
it. One URL reads exactly as it always did.
"""

import ssl
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar
from urllib.parse import urlsplit, urlunsplit

import aiormq
from aiormq.abc import AbstractConnection
from pamqp.common import FieldTable

from worker.transport.link.broker_failures import ConnectFailed, broker_address, is_access_refused

EXPECTED = "expected amqp://user:password@host:port/vhost or amqps://..."
SEPARATOR = ","

T = TypeVar("T")


def _check_one(text: str) -> None:
    # The URL holds the password: the message describes the value, never quotes it.
    if any(char.isspace() or not char.isprintable() for char in text):
        # urlsplit drops newlines silently; a second line in a secret file is a mistake.
        raise ValueError(f"{EXPECTED}, got whitespace or control characters in it")
    try:
        parts = urlsplit(text)
        hostname = parts.hostname
    except ValueError:
        raise ValueError(f"{EXPECTED}, got something that is not a URL") from None
    if parts.scheme not in ("amqp", "amqps"):
        scheme = f"scheme {parts.scheme!r}" if parts.scheme else "no scheme"
        raise ValueError(f"{EXPECTED}, got {scheme}")
    if not hostname:
        raise ValueError(f"{EXPECTED}, got no host")


def split_addresses(text: str) -> list[str]:
    """The URLs of a comma-separated list, each checked; `ValueError` says what is wrong.

    Whitespace is refused everywhere, around commas too: a value with a space or a
    newline in it is more likely a paste mistake than a list.
    """
    items = text.split(SEPARATOR)
    if len(items) == 1:
        _check_one(text)
        return [text]
    for number, item in enumerate(items, 1):
        if not item:
            raise ValueError(f"broker address {number} of {len(items)} is empty (stray comma?)")
        try:
            _check_one(item)
        except ValueError as exc:
            raise ValueError(f"broker address {number} of {len(items)}: {exc}") from None
    schemes = {urlsplit(item).scheme for item in items}
    if len(schemes) > 1:
        # One TLS setting serves every node: a list mixing amqp:// and amqps:// would
        # talk in clear to some nodes of a deployment that meant TLS.
        raise ValueError("broker addresses mix amqp:// and amqps://; use one scheme for all")
    return items


def parse_addresses(text: str) -> str:
    """`text` itself when every address in it is usable (the setting's parser)."""
    split_addresses(text)
    return text


def first_address(text: str) -> str:
    """The first URL of the list (what scheme and TLS settings are read from)."""
    return text.split(SEPARATOR, 1)[0]


def redact_addresses(text: str) -> str:
    """The setting (one URL or a cluster's list) with every password replaced by `***`,
    for logs, messages and reports; hosts are kept as written (IPv6 brackets too)."""
    return SEPARATOR.join(_redact_one(item) for item in text.split(SEPARATOR))


def _redact_one(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user = userinfo.split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{hostport}"))


async def connect_first(urls: list[str], attempt: Callable[[str], Awaitable[T]]) -> T:
    """`attempt(url)` for each URL in order until one succeeds (one-shot clients).

    Stops at ACCESS_REFUSED: the nodes of a cluster share their users, so the next
    node would refuse the same credentials. With several addresses, raises
    `ConnectFailed` naming every address tried, with the last error; with one, that
    address's own error.
    """
    tried: list[str] = []
    for url in urls:
        tried.append(broker_address(url))
        try:
            return await attempt(url)
        except Exception as exc:
            if len(urls) == 1:
                raise  # one address: its own error, exactly as before lists existed
            if is_access_refused(exc) or len(tried) == len(urls):
                raise ConnectFailed(tried, exc) from exc
    raise AssertionError("no broker address")  # split_addresses never gives an empty list


async def open_first(
    urls: Sequence[str],
    context: Callable[[str], ssl.SSLContext | None],
    name: str | None = None,
) -> AbstractConnection:
    """An aiormq connection to the first of `urls` that answers (`connect_first`), with
    `context(url)` for TLS and `name` as the connection's name in the management UI."""
    properties: FieldTable = {"connection_name": name} if name else {}

    async def attempt(url: str) -> AbstractConnection:
        return await aiormq.connect(url, context=context(url), client_properties=properties)

    return await connect_first(list(urls), attempt)
