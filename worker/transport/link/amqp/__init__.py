"""The worker's own AMQP 0-9-1 client: one connection and its channels, on one buffer.

`serve`'s link to the broker is this package, not aiormq: it reads the broker's bytes
in an asyncio protocol, cuts them into frames, decodes them with the codec the link was
given (`wire.FrameCodec`: pamqp's public functions, or the fast one of `frames.py`), and
writes frames the same way. Owning the connection is what lets the worker choose its
codec, see `connection.blocked`, and tell a silent broker, without reaching into a
library. It speaks what the worker needs and no more: PLAIN and EXTERNAL logins over TCP
or TLS, heartbeats, channels with publisher confirms, QoS, consumers, mandatory
publishes and their returns, acks, and the declarations of the topology.

Errors are aiormq's public exception classes (the producers' side, and the tools,
still use aiormq), so that every part of the worker tells a broker's refusal the same
way; a delivery is aiormq's `DeliveredMessage` dataclass.
"""
