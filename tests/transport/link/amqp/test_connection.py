"""The worker's own AMQP connection against a scripted broker: the handshake, the
broker's alarms however its bytes are cut, refusals, and the broker's own close."""

import asyncio

import pytest
from aiormq.exceptions import (
    AMQPConnectionError,
    AuthenticationError,
    ConnectionClosed,
    IncompatibleProtocolError,
)
from pamqp import commands
from pamqp.heartbeat import Heartbeat

from tests.transport.link.amqp.scripted_broker import ScriptedBroker, Session
from worker.transport.link.amqp.connection import AmqpConnection
from worker.transport.link.amqp.wire import HEARTBEAT, PROTOCOL_HEADER
from worker.transport.link.broker_failures import is_access_refused

Connection = commands.Connection


async def test_the_handshake_says_who_the_worker_is_and_what_it_can_hear() -> None:
    async with ScriptedBroker() as broker:
        connection = AmqpConnection(
            broker.url("?heartbeat=7"), client_properties={"connection_name": "worker 1"}
        )
        await connection.connect()
        await connection.close()
    assert broker.header == PROTOCOL_HEADER
    start_ok = broker.start_ok
    assert (start_ok.mechanism, start_ok.response) == ("PLAIN", "\0worker\0s3cret")
    properties = start_ok.client_properties
    assert properties["connection_name"] == "worker 1"
    # Without these the broker would not tell the worker what it relies on.
    assert properties["capabilities"] == {
        "authentication_failure_close": True,
        "basic.nack": True,
        "connection.blocked": True,
        "consumer_cancel_notify": True,
        "publisher_confirms": True,
    }
    assert (broker.tune_ok.heartbeat, broker.tune_ok.frame_max) == (7, 131072)
    assert broker.open.virtual_host == "jobs"
    assert connection.server_properties == {"product": "scripted"}


async def test_external_logs_in_with_the_certificate_alone() -> None:
    async with ScriptedBroker() as broker:
        connection = AmqpConnection(broker.url("?auth=external"))
        await connection.connect()
        await connection.close()
    assert (broker.start_ok.mechanism, broker.start_ok.response) == ("EXTERNAL", "")


async def test_a_mechanism_the_broker_does_not_offer_is_an_authentication_error() -> None:
    async with ScriptedBroker(mechanisms="PLAIN") as broker:
        with pytest.raises(AuthenticationError):
            await AmqpConnection(broker.url("?auth=external")).connect()


async def test_refused_credentials_are_an_access_refusal() -> None:
    async with ScriptedBroker(refuse_login=True) as broker:
        with pytest.raises(Exception) as refused:
            await AmqpConnection(broker.url()).connect()
        await asyncio.wait_for(broker.done.wait(), 5)  # the worker answered close-ok
    assert is_access_refused(refused.value), refused.value
    assert "ACCESS_REFUSED" in str(refused.value)


async def test_a_broker_of_another_protocol_version_is_refused() -> None:
    async with ScriptedBroker(answer_header=b"AMQP\x00\x00\x09\x00") as broker:
        with pytest.raises(IncompatibleProtocolError):
            await AmqpConnection(broker.url()).connect()


@pytest.mark.parametrize("piece", [1, 5, 4096])
async def test_the_broker_s_alarms_are_heard_however_its_bytes_are_cut(piece: int) -> None:
    said: list[str] = []
    heard = asyncio.Event()

    async def alarms(session: Session) -> None:
        import pamqp.frame

        data = b"".join(
            pamqp.frame.marshal(frame, 0)
            for frame in (
                Heartbeat(),
                Connection.Blocked(reason="low on memory"),
                Heartbeat(),
                Connection.Unblocked(),
            )
        )
        for start in range(0, len(data), piece):
            session.writer.write(data[start : start + piece])
            await session.writer.drain()
        await heard.wait()

    def unblocked() -> None:
        said.append("unblocked")
        heard.set()

    async with ScriptedBroker(after=alarms) as broker:
        connection = AmqpConnection(
            broker.url(), on_blocked=lambda reason: said.append(reason), on_unblocked=unblocked
        )
        await connection.connect()
        await asyncio.wait_for(heard.wait(), 5)
        await connection.close()
    assert said == ["low on memory", "unblocked"]


async def test_the_broker_s_close_ends_the_connection_with_its_reason() -> None:
    answered: list[object] = []

    async def close(session: Session) -> None:
        session.send(Connection.Close(320, "CONNECTION_FORCED - broker shutdown", 0, 0))
        answered.append(await session.read_method())

    async with ScriptedBroker(after=close) as broker:
        connection = AmqpConnection(broker.url())
        await connection.connect()
        closing = connection.closing
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(closing, 5)
        await asyncio.wait_for(broker.done.wait(), 5)
    assert closed.value.args == (320, "CONNECTION_FORCED - broker shutdown")
    assert connection.is_closed
    assert [type(frame) for frame in answered] == [Connection.CloseOk]


async def test_a_lost_socket_ends_the_connection() -> None:
    async def hang_up(session: Session) -> None:
        session.writer.close()

    async with ScriptedBroker(after=hang_up) as broker:
        connection = AmqpConnection(broker.url())
        await connection.connect()
        with pytest.raises(Exception, match="unexpectedly closed"):
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
        connection = AmqpConnection(broker.url("?heartbeat=1"))
        await connection.connect()
        await asyncio.wait_for(broker.done.wait(), 10)
        await connection.close()
    assert beats == [HEARTBEAT, HEARTBEAT]


async def test_a_broker_silent_for_one_and_a_half_intervals_is_cut_and_told() -> None:
    # The broker takes the client's heartbeats and sends nothing back: a path that
    # stalled one way. The connection tells on_silent, then drops the socket.
    told: list[float] = []

    async def say_nothing(session: Session) -> None:
        while await session.reader.read(4096):
            pass

    async with ScriptedBroker(after=say_nothing) as broker:
        connection = AmqpConnection(broker.url("?heartbeat=1"), on_silent=told.append)
        await connection.connect()
        with pytest.raises(AMQPConnectionError, match="unexpectedly closed"):
            await asyncio.wait_for(connection.closing, 30)
        await asyncio.wait_for(broker.done.wait(), 10)
    assert connection.is_closed
    [silent] = told
    assert silent > 1.5  # SILENT_INTERVALS heartbeat intervals of 1 s
