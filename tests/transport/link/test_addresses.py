"""Several broker addresses (a cluster's nodes): the parser, and the worker's connection
moving from node to node. The rotation runs against real sockets: closed ports refuse,
and the system broker is the node that answers."""

import asyncio
import socket
from typing import Any

import pytest
from yarl import URL

from tests.unavailable import AMQP_URL
from worker.transport.link.addresses import (
    connect_first,
    first_address,
    redact_addresses,
    split_addresses,
)
from worker.transport.link.broker_failures import ConnectFailed, broker_address, connect_failure
from worker.transport.link.connection import BrokerLink, connection_urls
from worker.transport.link.flow import BrokerFlow
from worker.transport.producers.client import PromptBrokerUnreachable, PromptClient
from worker.transport.settings import SettingsError, from_env, parse_amqp_url

ONE = "amqp://guest:s3cret@rabbit.internal:5672/prod"
THREE = "amqp://u:s3cret@n1:5672/,amqp://u:s3cret@n2:5672/,amqp://u:s3cret@n3:5672/"


def test_one_url_reads_as_before() -> None:
    assert parse_amqp_url(ONE) == ONE
    assert split_addresses(ONE) == [ONE]
    assert first_address(ONE) == ONE


def test_a_cluster_is_several_full_urls() -> None:
    assert parse_amqp_url(THREE) == THREE
    assert split_addresses(THREE) == THREE.split(",")
    assert from_env({"PROMPT_WORKER_AMQP_URL": THREE}).amqp_url == THREE


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("amqp://u:s3cret@n1/,", "broker address 2 of 2 is empty (stray comma?)"),
        (",amqp://u:s3cret@n1/", "broker address 1 of 2 is empty (stray comma?)"),
        (
            "amqp://u:s3cret@n1/, amqp://u:s3cret@n2/",
            "broker address 2 of 2: expected amqp://user:password@host:port/vhost or "
            "amqps://..., got whitespace or control characters in it",
        ),
        (
            "amqp://u:s3cret@n1/,http://u:s3cret@n2/",
            "broker address 2 of 2: expected amqp://user:password@host:port/vhost or "
            "amqps://..., got scheme 'http'",
        ),
        (
            "amqp://u:s3cret@n1/,amqp://u:s3cret@/",
            "broker address 2 of 2: expected amqp://user:password@host:port/vhost or "
            "amqps://..., got no host",
        ),
        (
            "amqp://u:s3cret@n1/,amqps://u:s3cret@n2/",
            "broker addresses mix amqp:// and amqps://; use one scheme for all",
        ),
    ],
)
def test_a_bad_list_says_which_address_and_never_quotes_it(value: str, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        parse_amqp_url(value)
    assert str(raised.value) == message
    with pytest.raises(SettingsError) as in_settings:
        from_env({"PROMPT_WORKER_AMQP_URL": value})
    assert "s3cret" not in str(in_settings.value)
    assert str(in_settings.value) == f"PROMPT_WORKER_AMQP_URL: {message}"


def test_each_address_gets_the_worker_defaults_and_loses_its_password_in_logs() -> None:
    urls = connection_urls("amqp://u:p@n1/,amqp://u:p@n2/?reconnect_interval=7")
    assert [url.query.get("reconnect_interval") for url in urls] == ["2", "7"]
    assert all(url.query.get("fail_fast") == "false" for url in urls)
    assert redact_addresses("amqp://u:p@n1/,amqp://u:q@n2/") == "amqp://u:***@n1/,amqp://u:***@n2/"
    assert redact_addresses(ONE) == "amqp://guest:***@rabbit.internal:5672/prod"
    # The host as written: an IPv6 address keeps its brackets.
    assert redact_addresses("amqps://u:p@[::1]:5671/v") == "amqps://u:***@[::1]:5671/v"
    assert redact_addresses("amqp://127.0.0.1/") == "amqp://127.0.0.1/"


def closed_port() -> int:
    """A local port nothing listens on: connecting to it is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_connect_first_takes_the_first_node_that_answers() -> None:
    dead = f"amqp://guest:guest@127.0.0.1:{closed_port()}/"
    tried: list[str] = []

    async def attempt(url: str) -> str:
        tried.append(url)
        if url == dead:
            raise ConnectionRefusedError(111, "Connection refused")
        return url

    assert await connect_first([dead, AMQP_URL], attempt) == AMQP_URL
    assert tried == [dead, AMQP_URL]


async def test_connect_first_names_every_address_tried_and_stops_at_wrong_credentials() -> None:
    ports = [closed_port(), closed_port()]
    urls = [f"amqp://guest:s3cret@127.0.0.1:{port}/" for port in ports]

    async def refused(url: str) -> None:
        raise ConnectionRefusedError(111, "Connection refused")

    with pytest.raises(ConnectFailed) as raised:
        await connect_first(urls, refused)
    message = connect_failure("unused", raised.value)
    assert message == (
        f"cannot reach the broker at 127.0.0.1:{ports[0]}, 127.0.0.1:{ports[1]}: connection refused"
    )
    assert "s3cret" not in message

    from tests.transport.link.test_broker_failures import REFUSED

    calls: list[str] = []

    async def wrong_password(url: str) -> None:
        calls.append(url)
        raise REFUSED

    with pytest.raises(ConnectFailed) as refused_all:
        await connect_first(urls, wrong_password)
    assert calls == urls[:1], "the next node shares the users: not tried"
    assert connect_failure("unused", refused_all.value).startswith("access refused by the broker")


async def test_one_address_fails_with_its_own_error() -> None:
    async def refused(url: str) -> None:
        raise ConnectionRefusedError(111, "Connection refused")

    with pytest.raises(ConnectionRefusedError):
        await connect_first([ONE], refused)


class Lines:
    """Stands in for the worker's structlog logger: keeps (event, fields)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []
        self.changed = asyncio.Event()

    def warning(self, event: str, **fields: Any) -> None:
        self.lines.append((event, fields))
        self.changed.set()

    async def until(self, event: str, count: int) -> None:
        async with asyncio.timeout(30):
            while len(self.named(event)) < count:
                self.changed.clear()
                await self.changed.wait()

    error = info = warning

    def named(self, event: str) -> list[dict[str, Any]]:
        return [fields for name, fields in self.lines if name == event]


def a_link(urls: list[URL], log: Lines) -> BrokerLink:
    flow = BrokerFlow(log, lambda: None)  # type: ignore[arg-type]
    return BrokerLink(urls, log=log, flow=flow)  # type: ignore[arg-type]


@pytest.mark.broker
async def test_failed_attempts_move_round_the_list_with_one_backoff() -> None:
    ports = [closed_port(), closed_port(), closed_port()]
    urls = [
        URL(f"amqp://guest:guest@127.0.0.1:{port}/?fail_fast=false&reconnect_interval=0.1")
        for port in ports
    ]
    log = Lines()
    link = a_link(urls, log)
    connecting = asyncio.create_task(link.connect())
    try:
        await log.until("broker_unreachable", 4)
    finally:
        connecting.cancel()
    lines = log.named("broker_unreachable")[:4]
    addresses = [f"127.0.0.1:{port}" for port in ports]
    assert [line["broker"] for line in lines] == [*addresses, addresses[0]]
    assert [line["next_broker"] for line in lines] == [*addresses[1:], *addresses[:2]]
    # One backoff across the nodes: it keeps growing from node to node.
    assert [line["attempt"] for line in lines] == [1, 2, 3, 4]


@pytest.mark.broker
async def test_a_lost_link_moves_to_the_next_node_and_comes_round_again() -> None:
    dead = closed_port()
    live = URL(AMQP_URL).update_query(fail_fast="false", reconnect_interval="0.1")
    other = URL(f"amqp://guest:guest@127.0.0.1:{dead}/?fail_fast=false&reconnect_interval=0.1")
    log = Lines()
    link = a_link([live, other], log)
    connection = await link.connect()
    assert link.broker == broker_address(live)
    # The link drops (as when the node goes): the next attempt is on the other node.
    await connection.close()
    assert connection.is_closed
    link.move_on()
    async with asyncio.timeout(30):
        again = await link.connect()
    await again.close()
    first = log.named("broker_unreachable")[0]
    assert first["broker"] == f"127.0.0.1:{dead}"
    assert first["next_broker"] == broker_address(live)
    assert link.broker == broker_address(live)


@pytest.mark.broker
async def test_the_client_opens_on_the_first_node_that_answers() -> None:
    dead = f"amqp://guest:guest@127.0.0.1:{closed_port()}/"
    client = PromptClient(f"{dead},{AMQP_URL}", request_queue="unused")
    await client.open()
    try:
        assert client.broker == broker_address(AMQP_URL)
    finally:
        await client.close()


async def test_the_client_names_every_node_it_could_not_reach() -> None:
    ports = [closed_port(), closed_port()]
    client = PromptClient(",".join(f"amqp://guest:s3cret@127.0.0.1:{port}/" for port in ports))
    with pytest.raises(PromptBrokerUnreachable) as raised:
        await client.open()
    assert str(raised.value) == (
        f"cannot reach the broker at 127.0.0.1:{ports[0]}, 127.0.0.1:{ports[1]}: connection refused"
    )
