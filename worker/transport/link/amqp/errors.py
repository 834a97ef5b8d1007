"""The broker's `close` methods, as aiormq's public exception classes."""

from aiormq.exceptions import (
    AMQPError,
    ChannelAccessRefused,
    ChannelClosed,
    ChannelLockedResource,
    ChannelNotFoundEntity,
    ChannelPreconditionFailed,
    ConnectionChannelError,
    ConnectionClosed,
    ConnectionCommandInvalid,
    ConnectionFrameError,
    ConnectionInternalError,
    ConnectionNotAllowed,
    ConnectionNotImplemented,
    ConnectionResourceError,
    ConnectionSyntaxError,
    ConnectionUnexpectedFrame,
)
from pamqp import commands

_CHANNEL_CLOSED: dict[int, type[AMQPError]] = {
    403: ChannelAccessRefused,
    404: ChannelNotFoundEntity,
    405: ChannelLockedResource,
    406: ChannelPreconditionFailed,
}
_CONNECTION_CLOSED: dict[int, type[AMQPError]] = {
    501: ConnectionFrameError,
    502: ConnectionSyntaxError,
    503: ConnectionCommandInvalid,
    504: ConnectionChannelError,
    505: ConnectionUnexpectedFrame,
    506: ConnectionResourceError,
    530: ConnectionNotAllowed,
    540: ConnectionNotImplemented,
    541: ConnectionInternalError,
}


def channel_closed(frame: commands.Channel.Close) -> AMQPError:
    """What a `channel.close` from the broker raises (406 PRECONDITION_FAILED, ...)."""
    kind = _CHANNEL_CLOSED.get(frame.reply_code or 0)
    if kind is None:
        return ChannelClosed(frame.reply_code, frame.reply_text)
    return kind(frame.reply_text)


def connection_closed(frame: commands.Connection.Close) -> AMQPError:
    """What a `connection.close` from the broker raises (320 CONNECTION_FORCED, ...)."""
    kind = _CONNECTION_CLOSED.get(frame.reply_code or 0)
    if kind is None:
        return ConnectionClosed(frame.reply_code, frame.reply_text)
    return kind(frame.reply_text)
