"""The fast frame codec writes and reads exactly what pamqp does, errors included."""

import datetime
from collections.abc import Callable
from typing import Any

import pamqp.frame
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from pamqp import commands
from pamqp.body import ContentBody
from pamqp.header import ContentHeader, ProtocolHeader
from pamqp.heartbeat import Heartbeat

from worker.transport.link import codec, frames
from worker.transport.link.amqp.wire import PAMQP_CODEC

Basic = commands.Basic

channels = st.integers(min_value=0, max_value=65535)
# Short strings, now and then longer than the 255 bytes AMQP allows.
texts = st.one_of(st.text(max_size=40), st.text(min_size=200, max_size=300))
exchanges = st.sampled_from(["", "amq.direct", "prompt.dead"])
tags = st.integers(min_value=-(2**63), max_value=2**63 - 1)
timestamps = st.datetimes(
    min_value=datetime.datetime(1971, 1, 1), max_value=datetime.datetime(2100, 1, 1)
).map(lambda moment: moment.replace(microsecond=0, tzinfo=datetime.UTC))
# Header values of every kind a table holds, nested tables and arrays included.
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.binary(max_size=20),
    timestamps,
)
field_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
# What RabbitMQ adds to a dead-lettered message: one table per queue and reason.
x_death = st.lists(
    st.fixed_dictionaries(
        {
            "count": st.integers(1, 2**31 - 1),
            "reason": st.sampled_from(["rejected", "expired", "maxlen", "delivery_limit"]),
            "queue": st.text(max_size=30),
            "time": timestamps,
            "exchange": st.text(max_size=30),
            "routing-keys": st.lists(st.text(max_size=30), max_size=3),
        }
    ),
    min_size=1,
    max_size=3,
)
headers = st.one_of(
    st.dictionaries(st.text(max_size=10), field_values, max_size=4),
    st.builds(
        lambda deaths, count: {"x-death": deaths, "x-delivery-count": count},
        x_death,
        st.integers(0, 100),
    ),
)


def _optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), st.just(""), strategy)


properties = st.builds(
    Basic.Properties,
    content_type=_optional(texts),
    content_encoding=_optional(texts),
    headers=st.one_of(st.none(), headers),
    delivery_mode=st.sampled_from([None, 1, 2]),
    priority=st.one_of(st.none(), st.integers(0, 9)),
    correlation_id=_optional(texts),
    reply_to=_optional(texts),
    expiration=_optional(texts),
    message_id=_optional(texts),
    timestamp=st.one_of(st.none(), timestamps),
    message_type=_optional(texts),
    user_id=_optional(texts),
    app_id=_optional(texts),
)
frame_values = st.one_of(
    st.builds(
        Basic.Publish,
        exchange=exchanges,
        routing_key=texts,
        mandatory=st.booleans(),
        immediate=st.booleans(),
    ),
    st.builds(Basic.Deliver, texts, tags, st.booleans(), exchanges, texts),
    st.builds(Basic.Ack, tags, st.booleans()),
    st.builds(Basic.Nack, tags, st.booleans(), st.booleans()),
    st.builds(Basic.Reject, tags, st.booleans()),
    st.builds(ContentHeader, st.just(0), st.integers(0, 2**40), properties),
    st.builds(ContentBody, st.binary(max_size=300)),
    st.builds(Basic.Return, st.integers(300, 599), texts, exchanges, texts),
    st.just(Heartbeat()),
    st.just(ProtocolHeader()),
    st.builds(commands.Channel.Close, st.integers(200, 599), texts),
)


def outcome(function: Callable[..., Any], *args: Any) -> tuple[str, Any]:
    try:
        return "value", function(*args)
    except Exception as exc:  # the same error, or none, from both codecs
        return "error", type(exc)


def same_unmarshal(ours: tuple[str, Any], theirs: tuple[str, Any]) -> bool:
    if ours[0] != theirs[0]:
        return False
    if ours[0] == "error":
        return bool(ours[1] is theirs[1])
    return bool(ours[1][:2] == theirs[1][:2]) and frames.same_frame(ours[1][2], theirs[1][2])


# Every job's frames go through this codec: ten times hypothesis's default examples.
@settings(max_examples=1000, deadline=None)
@given(frame_values, channels)
def test_marshal_writes_the_bytes_pamqp_writes(value: Any, channel: int) -> None:
    assert outcome(frames.marshal, value, channel) == outcome(frames.PAMQP_MARSHAL, value, channel)


@settings(max_examples=1000, deadline=None)
@given(frame_values, channels)
def test_unmarshal_reads_what_pamqp_reads(value: Any, channel: int) -> None:
    written, data = outcome(frames.PAMQP_MARSHAL, value, channel)
    assume(written == "value")  # not a frame pamqp can write (a string too long)
    # (pamqp cannot read back an empty body frame it wrote: neither can the fast codec.)
    assert same_unmarshal(outcome(frames.unmarshal, data), outcome(frames.PAMQP_UNMARSHAL, data))


@settings(max_examples=1000, deadline=None)
@given(frame_values, channels, st.data())
def test_a_damaged_frame_reads_or_fails_as_it_does_with_pamqp(
    value: Any, channel: int, data: st.DataObject
) -> None:
    written, whole = outcome(frames.PAMQP_MARSHAL, value, channel)
    assume(written == "value")
    wire = bytearray(whole)
    damage = data.draw(st.sampled_from(["cut", "byte", "extra"]))
    if damage == "cut":
        wire = wire[: data.draw(st.integers(0, len(wire) - 1))]
    elif damage == "byte":
        wire[data.draw(st.integers(0, len(wire) - 1))] = data.draw(st.integers(0, 255))
    else:
        wire += data.draw(st.binary(min_size=1, max_size=20))
    assert same_unmarshal(
        outcome(frames.unmarshal, bytes(wire)), outcome(frames.PAMQP_UNMARSHAL, bytes(wire))
    )


def test_the_reply_and_the_delivery_of_a_job_take_the_fast_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The frames of every job must not silently fall back to pamqp: that would keep the
    # bytes right and lose the point.
    def refuse(*_: Any) -> Any:
        raise AssertionError("handed to pamqp")

    reply = Basic.Properties(
        content_type="application/json", delivery_mode=2, correlation_id="c", message_id="m"
    )
    request = Basic.Properties(
        content_type="application/json",
        delivery_mode=2,
        reply_to="amq.gen-1",
        correlation_id="7",
        headers={"x-delivery-count": 1},
    )
    # With tracing on, a reply carries its trace context in headers of text values.
    traced_reply = Basic.Properties(
        content_type="application/json",
        delivery_mode=2,
        correlation_id="c",
        message_id="m",
        headers={
            "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "tracestate": "vendor=é",
        },
    )
    outgoing: list[Any] = [
        Basic.Publish(exchange="", routing_key="prompt.replies", mandatory=True),
        ContentHeader(0, 10, reply),
        ContentHeader(0, 10, traced_reply),
        ContentBody(b"0123456789"),
        Basic.Ack(41, True),
        Basic.Reject(42, False),
        Basic.Nack(43, False, True),
    ]
    # A job dead-lettered once and sent back: RabbitMQ's x-death table, with its nested
    # array and timestamp, and a timestamp property.
    sent_back = Basic.Properties(
        content_type="application/json",
        timestamp=datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC),
        headers={
            "x-death": [
                {
                    "count": 1,
                    "reason": "rejected",
                    "queue": "prompt.build",
                    "time": datetime.datetime(2026, 1, 2, 3, 4, 0, tzinfo=datetime.UTC),
                    "exchange": "",
                    "routing-keys": ["prompt.build"],
                }
            ]
        },
    )
    incoming: list[Any] = [
        Basic.Deliver("ctag", 41, False, "", "prompt.build"),
        ContentHeader(0, 10, request),
        ContentHeader(0, 10, sent_back),
        ContentBody(b"0123456789"),
        Basic.Ack(5, False),
    ]
    wire_in = [frames.PAMQP_MARSHAL(value, 1) for value in incoming]
    expected_in = [frames.PAMQP_UNMARSHAL(data) for data in wire_in]
    expected_out = [frames.PAMQP_MARSHAL(value, 1) for value in outgoing]
    monkeypatch.setattr(frames, "PAMQP_MARSHAL", refuse)
    monkeypatch.setattr(frames, "PAMQP_UNMARSHAL", refuse)

    assert [frames.marshal(value, 1) for value in outgoing] == expected_out
    decoded = [frames.unmarshal(data) for data in wire_in]
    for got, want in zip(decoded, expected_in, strict=True):
        assert got[:2] == want[:2]
        assert frames.same_frame(got[2], want[2])


def test_choosing_the_fast_codec_hands_the_link_its_functions_and_replaces_nothing() -> None:
    fast = codec.choose("fast")
    assert (fast.name, fast.encode, fast.decode) == ("fast", frames.marshal, frames.unmarshal)
    assert pamqp.frame.marshal is frames.PAMQP_MARSHAL
    assert pamqp.frame.unmarshal is frames.PAMQP_UNMARSHAL
    assert codec.choose("pamqp") is PAMQP_CODEC
    assert PAMQP_CODEC.encode is pamqp.frame.marshal


def test_the_choice_falls_back_to_pamqp_when_it_writes_a_frame_differently(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As a later pamqp release might: then its output is the right one.
    original = frames.PAMQP_MARSHAL

    def changed(value: Any, channel: int) -> bytes:
        data = original(value, channel)
        return data + b"\x00" if isinstance(value, Basic.Ack) else data

    monkeypatch.setattr(frames, "PAMQP_MARSHAL", changed)
    assert not frames.agrees_with_pamqp()
    assert codec.choose("fast") is PAMQP_CODEC
