"""`FrameReader`: the broker's bytes into frames, however the socket cuts them."""

from typing import Any

import pamqp.frame
import pytest
from aiormq.exceptions import IncompatibleProtocolError, InvalidFrameError
from pamqp import commands
from pamqp.body import ContentBody
from pamqp.header import ContentHeader
from pamqp.heartbeat import Heartbeat

from worker.transport.link import codec
from worker.transport.link.amqp.wire import HEARTBEAT, PAMQP_CODEC, FrameCodec, FrameReader
from worker.transport.link.frames import same_frame

CODECS = [PAMQP_CODEC, codec.choose("fast")]


def blocked(reason: str) -> tuple[int, Any]:
    return 0, commands.Connection.Blocked(reason=reason)


def a_delivery(channel: int, body: bytes) -> list[tuple[int, Any]]:
    """The three frames of a delivery on `channel` (its body may hold any bytes)."""
    properties = commands.Basic.Properties(message_id="m", headers={"x-delivery-count": 1})
    return [
        (channel, commands.Basic.Deliver("ctag", 1, False, "", "q")),
        (channel, ContentHeader(0, len(body), properties)),
        (channel, ContentBody(body)),
    ]


def wire(frames: list[tuple[int, Any]]) -> bytes:
    return b"".join(pamqp.frame.marshal(frame, channel) for channel, frame in frames)


def read_in_pieces(codec: FrameCodec, data: bytes, size: int) -> list[tuple[int, Any]]:
    reader = FrameReader(codec.decode)
    frames: list[tuple[int, Any]] = []
    for start in range(0, len(data), size):
        frames += reader.feed(data[start : start + size])
    return frames


def assert_same(got: list[tuple[int, Any]], want: list[tuple[int, Any]]) -> None:
    assert [channel for channel, _ in got] == [channel for channel, _ in want]
    for (_, left), (_, right) in zip(got, want, strict=True):
        assert same_frame(left, right), (left, right)


@pytest.mark.parametrize("frame_codec", CODECS, ids=lambda c: c.name)
def test_every_frame_is_read_in_order_however_the_bytes_are_cut(frame_codec: FrameCodec) -> None:
    # A body holding the very bytes of a blocked frame is a body: the real frames are
    # found between deliveries, whatever the chunk size.
    decoy = wire([blocked("not a frame: a job's body")])
    frames = [
        *a_delivery(1, decoy * 50),
        blocked("low on disk"),
        *a_delivery(2, b"x" * 70_000),
        (0, Heartbeat()),
        *a_delivery(1, decoy),
        (0, commands.Connection.Unblocked()),
    ]
    data = wire(frames)
    # What pamqp reads from each frame alone.
    expected = [pamqp.frame.unmarshal(wire([frame]))[1:] for frame in frames]
    for size in (1, 2, 7, 8, 13, 1000, 4096, 65536, len(data)):
        assert_same(read_in_pieces(frame_codec, data, size), expected)


def test_a_heartbeat_is_the_bytes_pamqp_writes() -> None:
    assert pamqp.frame.marshal(Heartbeat(), 0) == HEARTBEAT


def test_a_broker_that_answers_with_its_protocol_header_refused_ours() -> None:
    # A broker that does not speak AMQP 0-9-1 answers with the version it speaks.
    reader = FrameReader(PAMQP_CODEC.decode)
    with pytest.raises(IncompatibleProtocolError):
        reader.feed(b"AMQP\x00\x00\x09\x00")


def test_bytes_that_are_not_a_frame_are_an_invalid_frame() -> None:
    data = bytearray(wire([blocked("low on memory")]))
    data[-1] = 0x00  # no frame-end octet
    with pytest.raises(InvalidFrameError):
        FrameReader(PAMQP_CODEC.decode).feed(bytes(data))


def test_a_frame_pamqp_cannot_read_is_an_invalid_frame() -> None:
    # A method frame with an unknown method id, well framed.
    payload = b"\x00\x63\x00\x01"
    data = b"\x01\x00\x00" + len(payload).to_bytes(4, "big") + payload + b"\xce"
    with pytest.raises(InvalidFrameError):
        FrameReader(PAMQP_CODEC.decode).feed(data)
