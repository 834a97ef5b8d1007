"""The producers' link, without a broker: its pauses, and what it does with addresses
that do not answer (closed ports refuse at once)."""

import socket

import pytest
from aiormq.exceptions import (
    ChannelAccessRefused,
    ChannelLockedResource,
    ChannelNotFoundEntity,
)

from worker.transport.link.broker_failures import ConnectFailed
from worker.transport.producers.rpc import (
    FIRST_PAUSE,
    MAX_PAUSE,
    RpcLink,
    first_pause,
    passes_soon,
)
from worker.transport.retry import JITTER, Backoff


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_the_first_pause_is_the_urls_reconnect_interval() -> None:
    assert first_pause("amqp://u:p@n1/?reconnect_interval=0.2") == 0.2
    assert first_pause("amqp://u:p@n1/") == FIRST_PAUSE
    assert first_pause("amqp://u:p@n1/?reconnect_interval=soon") == FIRST_PAUSE


@pytest.mark.parametrize("attempt", [0, 1, 3, 10, 40])
def test_pauses_grow_up_to_the_cap_jittered(attempt: int) -> None:
    full = min(MAX_PAUSE, 0.2 * 2**attempt)
    pauses = set()
    for _ in range(200):
        producer = Backoff(0.2, MAX_PAUSE)
        for _ in range(attempt):
            producer.next()
        pauses.add(producer.next())
    assert all(full * (1 - JITTER) - 0.005 <= pause <= full for pause in pauses)
    assert len(pauses) > 1  # not in step with every other producer


async def test_opening_names_every_address_that_did_not_answer() -> None:
    ports = [closed_port(), closed_port()]
    url = ",".join(f"amqp://guest:guest@127.0.0.1:{port}/" for port in ports)
    link = RpcLink(url, "requests", "replies", lambda *_: None)
    with pytest.raises(ConnectFailed) as raised:
        await link.open()
    assert raised.value.tried == [f"127.0.0.1:{port}" for port in ports]
    assert not link.connected and link.broker is None
    await link.close()


def test_only_what_another_attempt_mends_lets_a_closed_channel_pass() -> None:
    ours = "prompt-worker.rerender.0b73d71f"
    # The node that held our reply queue died: the cluster is still removing it.
    gone = ChannelNotFoundEntity(f"NOT_FOUND - no queue '{ours}' in vhost '/'")
    assert passes_soon(gone, ours)
    assert passes_soon(ChannelLockedResource("RESOURCE_LOCKED - cannot obtain access"), ours)
    # Someone else's queue missing, or another refusal, is the run's end.
    other = ChannelNotFoundEntity("NOT_FOUND - no queue 'build-prompt' in vhost '/'")
    assert not passes_soon(other, ours)
    assert not passes_soon(other, "build")  # a name that is only part of another
    assert not passes_soon(ChannelAccessRefused(f"ACCESS_REFUSED - queue '{ours}'"), ours)
