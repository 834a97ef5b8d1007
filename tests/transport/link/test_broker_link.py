"""`BrokerLink`'s aiormq connections against a scripted broker: what the handshake says,
the broker's alarms heard through aiormq's public `ready()`, refusals, the broker's own
close, heartbeats, a silent broker cut, and a broker call that is never answered."""

import asyncio
from typing import Any

import pytest
from aiormq.exceptions import (
    AMQPConnectionError,
    AuthenticationError,
    ChannelInvalidStateError,
    ConnectionClosed,
    ProtocolSyntaxError,
)
from pamqp import commands
from pamqp.heartbeat import Heartbeat
from yarl import URL

from tests.transport.link.scripted_broker import ScriptedBroker, Session
from worker.transport.link import flow as flow_module
from worker.transport.link.broker_failures import is_access_refused
from worker.transport.link.connection import BrokerLink
from worker.transport.link.flow import BLOCKED_REASON, BrokerFlow

Connection = commands.Connection
PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
HEARTBEAT = b"\x08\x00\x00\x00\x00\x00\x00\xce"


class Lines:
    """Stands in for the worker's structlog logger: keeps (event, fields)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.lines.append((event, fields))

    info = error = warning

    def named(self, event: str) -> list[dict[str, Any]]:
        return [fields for name, fields in self.lines if name == event]


def a_link(
    url: URL, log: Lines | None = None, changed: asyncio.Event | None = None, **kwargs: Any
) -> BrokerLink:
    log = log or Lines()
    flow = BrokerFlow(log, changed.set if changed else lambda: None)  # type: ignore[arg-type]
    return BrokerLink([url], log=log, flow=flow, **kwargs)  # type: ignore[arg-type]


async def test_the_handshake_says_who_the_worker_is_and_what_it_can_hear() -> None:
    async with ScriptedBroker() as broker:
        link = a_link(broker.url("?heartbeat=7"), client_properties={"connection_name": "w 1"})
        connection = await link.attempt()
        await connection.close()
    assert broker.header == PROTOCOL_HEADER
    start_ok = broker.start_ok
    assert (start_ok.mechanism, start_ok.response) == ("PLAIN", "\0worker\0s3cret")
    properties = start_ok.client_properties
    assert properties["connection_name"] == "w 1"
    # Without these the broker would not tell the worker what it relies on.
    for capability in (
        "authentication_failure_close",
        "basic.nack",
        "connection.blocked",
        "consumer_cancel_notify",
        "publisher_confirms",
    ):
        assert properties["capabilities"][capability] is True, capability
    assert broker.tune_ok.heartbeat == 7
    assert broker.open.virtual_host == "jobs"


async def test_external_logs_in_with_the_certificate_alone() -> None:
    async with ScriptedBroker() as broker:
        connection = await a_link(broker.url("?auth=external")).attempt()
        await connection.close()
    assert (broker.start_ok.mechanism, broker.start_ok.response) == ("EXTERNAL", "")


async def test_a_mechanism_the_broker_does_not_offer_is_an_authentication_error() -> None:
    async with ScriptedBroker(mechanisms="PLAIN") as broker:
        with pytest.raises(AuthenticationError):
            await a_link(broker.url("?auth=external")).attempt()


async def test_refused_credentials_are_an_access_refusal() -> None:
    async with ScriptedBroker(refuse_login=True) as broker:
        with pytest.raises(Exception) as refused:
            await a_link(broker.url()).attempt()
        await asyncio.wait_for(broker.done.wait(), 5)
    assert is_access_refused(refused.value), refused.value
    assert "ACCESS_REFUSED" in str(refused.value)


async def test_a_broker_of_another_protocol_version_is_refused() -> None:
    async with ScriptedBroker(answer_header=b"AMQP\x00\x00\x09\x00") as broker:
        with pytest.raises(ProtocolSyntaxError):
            await a_link(broker.url()).attempt()


@pytest.mark.parametrize("piece", [1, 5, 4096])
async def test_the_broker_s_alarms_block_and_release_the_flow_however_its_bytes_are_cut(
    piece: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(flow_module, "CHECK_EVERY", 0.05)
    unblock = asyncio.Event()

    async def alarms(session: Session) -> None:
        import pamqp.frame

        async def send(*frames: Any) -> None:
            data = b"".join(pamqp.frame.marshal(frame, 0) for frame in frames)
            for start in range(0, len(data), piece):
                session.writer.write(data[start : start + piece])
                await session.writer.drain()

        await send(Heartbeat(), Connection.Blocked(reason="low on memory"), Heartbeat())
        await unblock.wait()
        await send(Connection.Unblocked())
        while await session.reader.read(4096):
            pass

    log, changed = Lines(), asyncio.Event()
    async with ScriptedBroker(after=alarms) as broker:
        link = a_link(broker.url(), log, changed)
        connection = await link.attempt()
        await asyncio.wait_for(changed.wait(), 5)
        assert link.flow.blocked and link.flow.reason == BLOCKED_REASON
        waiting = asyncio.ensure_future(link.flow.admit())
        await asyncio.sleep(0.2)
        assert not waiting.done()
        unblock.set()
        await asyncio.wait_for(waiting, 5)
        assert not link.flow.blocked
        await connection.close()
    assert [fields["reason"] for fields in log.named("broker_blocked")] == [BLOCKED_REASON]
    [unblocked] = log.named("broker_unblocked")
    assert (unblocked["held"], unblocked["why"]) == (1, "unblocked by the broker")


async def test_the_broker_s_close_ends_the_connection_with_its_reason() -> None:
    answered: list[object] = []

    async def close(session: Session) -> None:
        session.send(Connection.Close(320, "CONNECTION_FORCED - broker shutdown", 0, 0))
        answered.append(await session.read_method())

    async with ScriptedBroker(after=close) as broker:
        connection = await a_link(broker.url()).attempt()
        closing = connection.closing
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(closing, 5)
        await asyncio.wait_for(broker.done.wait(), 5)
    assert closed.value.args[:2] == (320, "CONNECTION_FORCED - broker shutdown")
    assert connection.is_closed
    assert [type(frame) for frame in answered] == [Connection.CloseOk]


async def test_a_lost_socket_ends_the_connection() -> None:
    async def hang_up(session: Session) -> None:
        session.writer.close()

    async with ScriptedBroker(after=hang_up) as broker:
        connection = await a_link(broker.url()).attempt()
        # aiormq ends a connection whose socket reached its end without an error.
        await asyncio.wait_for(connection.closing, 5)
    assert connection.is_closed


async def test_heartbeats_are_sent_while_the_link_is_idle() -> None:
    beats: list[bytes] = []

    async def listen(session: Session) -> None:
        while len(beats) < 2:
            head = await session.reader.readexactly(8)
            if head == HEARTBEAT:
                beats.append(head)

    async with ScriptedBroker(after=listen) as broker:
        # Every second (half the interval); the silent scripted broker is cut after 3 s.
        connection = await a_link(broker.url("?heartbeat=2")).attempt()
        await asyncio.wait_for(broker.done.wait(), 10)
        await connection.close()
    assert beats == [HEARTBEAT, HEARTBEAT]


async def test_a_broker_silent_for_one_and_a_half_intervals_is_cut_and_told() -> None:
    # The broker takes the client's heartbeats and sends nothing back: a path that
    # stalled one way. The link says so, then drops the socket.
    async def say_nothing(session: Session) -> None:
        while await session.reader.read(4096):
            pass

    log = Lines()
    async with ScriptedBroker(after=say_nothing) as broker:
        connection = await a_link(broker.url("?heartbeat=1"), log).attempt()
        with pytest.raises(AMQPConnectionError):
            # aiormq alone would wait (1 + 1) * 3 s: the cut comes first.
            await asyncio.wait_for(connection.closing, 5)
        await asyncio.wait_for(broker.done.wait(), 10)
    assert connection.is_closed
    [silent] = log.named("broker_link_silent")
    assert silent["silent_s"] >= 1.5  # SILENT_INTERVALS heartbeat intervals of 1 s


async def test_a_broker_call_never_answered_gives_up_and_closes_the_channel() -> None:
    # The broker opens the channel and then swallows the declaration: the call gives up
    # at its timeout instead of waiting for ever, and the channel is not used again.
    async def swallow_the_declare(session: Session) -> None:
        channel, _ = await session.read()  # channel.open
        session.send(commands.Channel.OpenOk(), channel)
        _, select = await session.read()
        assert isinstance(select, commands.Confirm.Select)
        session.send(commands.Confirm.SelectOk(), channel)
        while await session.reader.read(4096):
            pass

    capabilities = {"capabilities": {"publisher_confirms": True, "basic.nack": True}}
    async with ScriptedBroker(after=swallow_the_declare, server_properties=capabilities) as broker:
        connection = await a_link(broker.url()).attempt()
        channel = await connection.channel(publisher_confirms=True, timeout=5)
        with pytest.raises(TimeoutError):
            await channel.queue_declare("jobs", durable=True, timeout=0.5)
        with pytest.raises(ChannelInvalidStateError):
            await channel.queue_declare("jobs", durable=True, timeout=0.5)
        await asyncio.wait_for(connection.close(), 5)
