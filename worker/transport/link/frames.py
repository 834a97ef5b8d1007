"""A faster AMQP codec for the frames of every job, for the worker's own link.

pamqp encodes and decodes every frame by walking each method's and each property set's
attribute list generically. On the worker's hot path that is a sizeable share of a
job's CPU (docs/PERFORMANCE.md, "The frame codec"): per job, the delivery's method,
header and body frames come in, the reply's publish, header and body frames and the
acknowledgement go out, and the broker's confirm comes back.

`marshal` and `unmarshal` have the signatures of `pamqp.frame.marshal` and `unmarshal`,
and the link (`worker.transport.link.amqp`) calls them when `serve` runs with the fast
codec (`codec.choose`); pamqp's functions are left as they are. They encode and decode
those frames directly and hand everything else, and anything unusual about these (a
named exchange, a property of a type without a fast path, a truncated or malformed
frame), to pamqp's own functions, so the bytes on the wire and the objects the link
receives are the same as pamqp's, errors included. `codec.choose` checks that on
samples first (`agrees_with_pamqp`) and takes pamqp's codec if any differs.

It stands on pamqp's public API only (its commands, header and body classes, their
`attributes()`, `amqp_type()` and `flags`, and `pamqp.decode`), and it is proven against
the one pamqp release pyproject.toml pins. This module is imported only when `serve`
chooses it (worker/transport/link/codec.py, which falls back to pamqp's codec on any
error here).
"""

import datetime
import struct
from typing import Any, Final

import pamqp.decode
import pamqp.frame
from pamqp import commands
from pamqp.body import ContentBody
from pamqp.frame import FrameTypes
from pamqp.header import ContentHeader

# pamqp's own functions, for every frame without a fast path.
PAMQP_MARSHAL: Final = pamqp.frame.marshal
PAMQP_UNMARSHAL: Final = pamqp.frame.unmarshal

_FRAME_END = 0xCE
_FRAME_END_BYTE = b"\xce"
_METHOD, _HEADER, _BODY = 1, 2, 3
_FRAME_HEAD = struct.Struct(">BHI")
_METHOD_INDEX = struct.Struct(">I")
_CONTENT_HEAD = struct.Struct(">HHQH")  # class id, weight, body size, property flags
_TAG = struct.Struct(">q")  # delivery tags are signed long-longs in pamqp
_HEADER_START = struct.pack(">HH", commands.Basic.frame_id, 0)

_Basic = commands.Basic
_Properties = _Basic.Properties
_PUBLISH, _DELIVER = _Basic.Publish.index, _Basic.Deliver.index
_ACK, _NACK, _REJECT = _Basic.Ack.index, _Basic.Nack.index, _Basic.Reject.index
# basic.publish up to its routing key: the method, the ticket (0) and the default
# exchange (an empty short string).
_PUBLISH_HEAD = _METHOD_INDEX.pack(_PUBLISH) + b"\x00\x00" + b"\x00"
# Each property in wire order: its name, its flag bit and its AMQP type.
_PROPERTIES: Final = tuple(
    (name, _Properties.flags[name], _Properties.amqp_type(name))
    for name in _Properties.attributes()
)
# What the first property flag word can hold (bit 0 would announce a second word).
_KNOWN_FLAGS = sum(flag for _, flag, _ in _PROPERTIES)


class _Unsupported(Exception):
    """Not for the fast path: pamqp handles the frame."""


def _frame(frame_type: int, channel: int, payload: bytes) -> bytes:
    return b"".join((_FRAME_HEAD.pack(frame_type, channel, len(payload)), payload, _FRAME_END_BYTE))


def _shortstr(value: object) -> bytes:
    if type(value) is not str:
        raise _Unsupported
    data = value.encode()
    if len(data) > 255:
        raise _Unsupported  # pamqp raises its own error for it
    return bytes((len(data),)) + data


def _properties(properties: Any) -> bytes:
    """Basic properties as pamqp's `BasicProperties.marshal` writes them."""
    flags = 0
    parts = [b""]
    for name, flag, kind in _PROPERTIES:
        value = getattr(properties, name)
        if value is None or value == "":
            continue
        if kind == "shortstr":
            parts.append(_shortstr(value))
        elif kind == "octet" and type(value) is int and 0 <= value <= 255:
            parts.append(bytes((value,)))
        elif kind == "table" and type(value) is dict:
            parts.append(_text_table(value))
        else:
            raise _Unsupported  # a timestamp (rare on replies)
        flags |= flag
    parts[0] = flags.to_bytes(2, "big")
    return b"".join(parts)


def _text_table(table: dict[Any, Any]) -> bytes:
    """A field table of text values only, as pamqp writes it (a reply's trace context:
    `traceparent`, `tracestate`); any other value is pamqp's to write."""
    entries: list[bytes] = []
    for key, value in table.items():
        if type(value) is not str:
            raise _Unsupported
        data = value.encode()
        try:
            head = _TEXT_KEYS[key]
        except KeyError:
            head = _text_key(key)
        entries += (head, len(data).to_bytes(4, "big"), data)
    body = b"".join(entries)
    return len(body).to_bytes(4, "big") + body


# A text entry's key and type, by key: a reply's headers repeat the same few keys.
_TEXT_KEYS: dict[Any, bytes] = {}
_TEXT_KEYS_KEPT = 64


def _text_key(key: Any) -> bytes:
    head = _shortstr(key) + b"S"  # a key that is not a short string is pamqp's to write
    if len(_TEXT_KEYS) < _TEXT_KEYS_KEPT:
        _TEXT_KEYS[key] = head
    return head


def _method_payload(value: Any) -> bytes:
    kind = type(value)
    if kind is _Basic.Publish:
        if value.exchange != "" or value.ticket != 0:
            raise _Unsupported  # pamqp validates exchange names
        bits = (1 if value.mandatory else 0) | (2 if value.immediate else 0)
        return b"".join((_PUBLISH_HEAD, _shortstr(value.routing_key), bytes((bits,))))
    if kind is _Basic.Ack:
        return _METHOD_INDEX.pack(_ACK) + _tag_and_bits(value.delivery_tag, value.multiple)
    if kind is _Basic.Reject:
        return _METHOD_INDEX.pack(_REJECT) + _tag_and_bits(value.delivery_tag, value.requeue)
    if kind is _Basic.Nack:
        return _METHOD_INDEX.pack(_NACK) + _tag_and_bits(
            value.delivery_tag, value.multiple, value.requeue
        )
    raise _Unsupported


def _tag_and_bits(tag: object, *bits: object) -> bytes:
    if type(tag) is not int or not 0 <= tag < 2**63:
        raise _Unsupported
    byte = 0
    for position, bit in enumerate(bits):
        if bit:
            byte |= 1 << position
    return _TAG.pack(tag) + bytes((byte,))


def marshal(frame_value: FrameTypes, channel_id: int) -> bytes:
    """`pamqp.frame.marshal`, with the per-job frames encoded directly."""
    value: Any = frame_value  # pamqp's union has no common attributes to read
    kind = type(value)
    try:
        if kind is ContentBody:
            body = value.value
            if type(body) is bytes:
                return _frame(_BODY, channel_id, body)
        elif kind is ContentHeader:
            size = value.body_size
            if type(size) is int and 0 <= size < 2**64:
                payload = _HEADER_START + size.to_bytes(8, "big") + _properties(value.properties)
                return _frame(_HEADER, channel_id, payload)
        else:
            return _frame(_METHOD, channel_id, _method_payload(value))
    except _Unsupported:
        pass
    return PAMQP_MARSHAL(frame_value, channel_id)


def _read_shortstr(data: bytes, offset: int) -> tuple[str, int]:
    end = offset + 1 + data[offset]
    if end > len(data):
        raise _Unsupported
    return data[offset + 1 : end].decode(), end


def _unmarshal_method(data: bytes, end: int) -> Any:
    (index,) = _METHOD_INDEX.unpack_from(data, 7)
    if index == _DELIVER:
        deliver = _Basic.Deliver()
        deliver.consumer_tag, offset = _read_shortstr(data, 11)
        (deliver.delivery_tag,) = _TAG.unpack_from(data, offset)
        deliver.redelivered = bool(data[offset + 8] & 1)
        deliver.exchange, offset = _read_shortstr(data, offset + 9)
        deliver.routing_key, offset = _read_shortstr(data, offset)
        if offset > end:
            raise _Unsupported
        return deliver
    if index in (_ACK, _NACK, _REJECT):
        if end < 20:
            raise _Unsupported
        (tag,) = _TAG.unpack_from(data, 11)
        bits = data[19]
        if index == _ACK:
            return _Basic.Ack(tag, bool(bits & 1))
        if index == _NACK:
            return _Basic.Nack(tag, bool(bits & 1), bool(bits & 2))
        return _Basic.Reject(tag, bool(bits & 1))
    raise _Unsupported


def _unmarshal_header(data: bytes, end: int) -> ContentHeader:
    class_id, weight, body_size, flags = _CONTENT_HEAD.unpack_from(data, 7)
    if flags & ~_KNOWN_FLAGS:
        raise _Unsupported  # a second flag word, or bits pamqp would ignore
    properties = _Properties()
    offset = 21
    value: object
    for name, flag, kind in _PROPERTIES:
        if not flags & flag:
            continue
        if kind == "shortstr":
            value, offset = _read_shortstr(data, offset)
        elif kind == "octet":
            value = data[offset]
            offset += 1
        else:  # a table or a timestamp: pamqp's own decoder, on the rest of the frame
            consumed, value = pamqp.decode.by_type(data[offset:end], kind)
            offset += consumed
        setattr(properties, name, value)
    if offset > end:
        raise _Unsupported
    header = ContentHeader(weight, body_size, properties)
    header.class_id = class_id
    return header


def unmarshal(data_in: bytes) -> tuple[int, int, FrameTypes]:
    """`pamqp.frame.unmarshal`, with the per-job frames decoded directly.

    aiormq hands it exactly one frame at a time; anything else goes to pamqp.
    """
    data = data_in
    try:
        if len(data) >= 12:
            frame_type, channel, size = _FRAME_HEAD.unpack_from(data)
            end = 7 + size
            if len(data) == end + 1 and data[end] == _FRAME_END:
                if frame_type == _BODY:
                    return end + 1, channel, ContentBody(data[7:end])
                if frame_type == _METHOD:
                    return end + 1, channel, _unmarshal_method(data, end)
                if frame_type == _HEADER and size >= 14:
                    return end + 1, channel, _unmarshal_header(data, end)
    except (_Unsupported, struct.error, IndexError, ValueError):
        pass  # pamqp decodes it, or raises its own error for it
    return PAMQP_UNMARSHAL(data)


def same_frame(left: Any, right: Any) -> bool:
    """Whether two decoded frames are equal in type and in every attribute."""
    if type(left) is not type(right):
        return False
    if isinstance(left, ContentHeader):
        return (left.class_id, left.weight, left.body_size) == (
            right.class_id,
            right.weight,
            right.body_size,
        ) and same_frame(left.properties, right.properties)
    if isinstance(left, ContentBody):
        return bool(left.value == right.value)
    names = getattr(type(left), "__slots__", ())
    if not all(getattr(left, name) == getattr(right, name) for name in names):
        return False
    return getattr(left, "__dict__", None) == getattr(right, "__dict__", None)


def _samples() -> list[tuple[FrameTypes, int]]:
    """One of each frame the fast path handles, as a job's traffic has them."""
    properties = _Properties(
        content_type="application/json",
        headers={"x-delivery-count": 2},
        delivery_mode=2,
        correlation_id="job-1",
        reply_to="amq.gen-x",
        message_id="a1",
    )
    moment = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    # A job dead-lettered and sent back: nested tables and arrays, timestamps.
    sent_back = _Properties(
        content_type="application/json",
        timestamp=moment,
        headers={
            "x-death": [
                {
                    "count": 1,
                    "reason": "rejected",
                    "queue": "prompt.build",
                    "time": moment,
                    "exchange": "",
                    "routing-keys": ["prompt.build"],
                }
            ],
        },
    )
    return [
        (_Basic.Deliver("ctag", 7, True, "", "prompt.build"), 1),
        (ContentHeader(0, 3, properties), 1),
        (ContentHeader(0, 3, sent_back), 1),
        (ContentHeader(0, 3, _Properties(content_type="application/json", delivery_mode=2)), 1),
        (ContentBody(b"{}\n"), 1),
        (_Basic.Publish(0, "", "prompt.replies", True, False), 1),
        (_Basic.Ack(7, True), 1),
        (_Basic.Nack(8, False, True), 2),
        (_Basic.Reject(9, True), 3),
    ]


def agrees_with_pamqp() -> bool:
    """Whether this codec writes and reads the samples exactly as pamqp does."""
    for value, channel in _samples():
        data = PAMQP_MARSHAL(value, channel)
        if marshal(value, channel) != data:
            return False
        ours, theirs = unmarshal(data), PAMQP_UNMARSHAL(data)
        if ours[:2] != theirs[:2] or not same_frame(ours[2], theirs[2]):
            return False
    return True
