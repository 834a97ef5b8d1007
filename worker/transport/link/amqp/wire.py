"""Frames on the wire: the codec a link uses, and the cutting of bytes into frames."""

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pamqp.exceptions
import pamqp.frame
from aiormq.exceptions import IncompatibleProtocolError, InvalidFrameError
from pamqp.frame import FrameTypes

Encode = Callable[[FrameTypes, int], bytes]
Decode = Callable[[bytes], tuple[int, int, FrameTypes]]

_HEAD = struct.Struct(">BHI")  # frame type, channel, payload size
_HEAD_BYTES = _HEAD.size
_FRAME_END = 0xCE
PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
HEARTBEAT = b"\x08\x00\x00\x00\x00\x00\x00\xce"


@dataclass(frozen=True, slots=True)
class FrameCodec:
    """How a link writes (`encode(frame, channel)`) and reads (`decode(one frame)`)."""

    name: str
    encode: Encode
    decode: Decode


PAMQP_CODEC = FrameCodec("pamqp", pamqp.frame.marshal, pamqp.frame.unmarshal)


class FrameReader:
    """Cuts a connection's incoming bytes into frames, decoded by `decode`.

    A chunk holding whole frames (the usual case) is read in place; the start of a frame
    the chunk cuts is kept until the rest arrives, and a large frame's chunks are only
    gathered until it is whole.
    """

    __slots__ = ("_decode", "_kept", "_needed", "_started")

    def __init__(self, decode: Decode) -> None:
        self._decode = decode
        self._kept = bytearray()
        self._needed = 0  # bytes `_kept` must hold before a frame can be read from it
        self._started = False

    def feed(self, data: bytes) -> list[tuple[int, Any]]:
        """The frames completed by `data`, as (channel, frame), in order. Raises
        `IncompatibleProtocolError` when the broker answers with its protocol header
        (it refused ours), and `InvalidFrameError` for bytes that are not a frame."""
        if self._kept:
            self._kept += data
            if len(self._kept) < self._needed:
                return []
            data = bytes(self._kept)
            self._kept.clear()
        elif not self._started:
            if data[:4] == PROTOCOL_HEADER[:4]:
                raise IncompatibleProtocolError(f"the broker answered {data[:8]!r}")
            self._started = True
        frames: list[tuple[int, Any]] = []
        size = len(data)
        start = 0
        decode = self._decode
        unpack = _HEAD.unpack_from
        while size - start >= _HEAD_BYTES:
            _, _, length = unpack(data, start)
            end = start + _HEAD_BYTES + length + 1
            if end > size:
                self._needed = end - start
                break
            if data[end - 1] != _FRAME_END:
                raise InvalidFrameError(f"a frame does not end with 0xCE at byte {end - 1}")
            try:
                _, channel, frame = decode(data[start:end] if start or end != size else data)
            except pamqp.exceptions.PAMQPException as exc:
                raise InvalidFrameError(str(exc)) from exc
            frames.append((channel, frame))
            start = end
        else:
            self._needed = _HEAD_BYTES
        if start < size:
            self._kept += memoryview(data)[start:]
        return frames
