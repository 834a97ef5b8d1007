"""What the worker's commands say when the broker cannot be used, and the backoff of
the worker's connection attempts (no broker needed: the exceptions are the ones the
client library raises, as measured against RabbitMQ)."""

import socket

import pytest
from aiormq.exceptions import (
    AMQPConnectionError,
    ConnectionClosed,
    ConnectionInternalError,
    InvalidFrameError,
    ProbableAuthenticationError,
)

from worker.transport.link.broker_failures import (
    broker_address,
    connect_failure,
    describe,
    is_access_refused,
)
from worker.transport.retry import Backoff

REFUSED = ProbableAuthenticationError(
    "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. "
    "For details see the broker logfile."
)


@pytest.mark.parametrize(
    ("url", "address"),
    [
        ("amqp://guest:s3cret@rabbit.internal:5673/prod?heartbeat=10", "rabbit.internal:5673"),
        ("amqp://guest:s3cret@rabbit.internal/", "rabbit.internal:5672"),
        ("amqps://u:p@rabbit.internal/", "rabbit.internal:5671"),
        ("amqp://[::1]:5672/", "[::1]:5672"),
    ],
)
def test_the_address_is_host_and_port_only(url: str, address: str) -> None:
    assert broker_address(url) == address


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (AMQPConnectionError(111, "Connect call failed ('127.0.0.1', 5999)"), "connection refused"),
        (AMQPConnectionError(-2, "Name or service not known"), "name or service not known"),
        (TimeoutError(), "no answer in time"),
        (ConnectionResetError(104, "Connection reset by peer"), "connection reset by peer"),
        (
            InvalidFrameError("Expected one of ['Connection.OpenOk'], got <Connection.Close>"),
            "the broker closed the connection while opening it (check the virtual host)",
        ),
        (REFUSED, "access refused: the broker rejected the user name or password"),
        (
            ConnectionClosed(320, "CONNECTION_FORCED - broker forced connection closure"),
            "the broker closed the connection: CONNECTION_FORCED - broker forced connection "
            "closure",
        ),
        (
            ConnectionInternalError("INTERNAL_ERROR"),
            "the broker closed the connection: INTERNAL_ERROR",
        ),
    ],
)
def test_reasons_are_short_words(exc: BaseException, reason: str) -> None:
    assert describe(exc) == reason


def test_only_wrong_credentials_are_not_worth_retrying() -> None:
    assert is_access_refused(REFUSED)
    assert not is_access_refused(AMQPConnectionError(111, "Connect call failed"))
    assert not is_access_refused(TimeoutError())


def test_command_messages() -> None:
    assert connect_failure("10.0.0.5:5672", REFUSED) == (
        "access refused by the broker at 10.0.0.5:5672: check the user name and password"
    )
    down = AMQPConnectionError(111, "Connect call failed ('10.0.0.5', 5672)")
    assert connect_failure("10.0.0.5:5672", down) == (
        "cannot reach the broker at 10.0.0.5:5672: connection refused"
    )


def test_a_real_refused_connection_reads_the_same() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(OSError) as raised:
        socket.create_connection(("127.0.0.1", port), timeout=5)
    assert describe(raised.value) == "connection refused"


def test_backoff_doubles_up_to_the_cap_and_resets() -> None:
    longest = Backoff(1.0, cap=30.0, uniform=lambda: 0.0)
    assert [longest.next() for _ in range(7)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    longest.reset()
    assert longest.next() == 1.0


def test_jitter_shortens_each_pause_by_a_fifth_at_most() -> None:
    shortest = Backoff(1.0, cap=30.0, uniform=lambda: 1.0)
    assert [shortest.next() for _ in range(6)] == [0.8, 1.6, 3.2, 6.4, 12.8, 24.0]


def test_backoff_survives_a_very_long_outage() -> None:
    backoff = Backoff(2.0, cap=30.0, uniform=lambda: 0.0)
    assert {backoff.next() for _ in range(5000)} >= {30.0}
    assert backoff.next() == 30.0
