"""A broker that follows a script: the AMQP handshake, then whatever a test sends.

For what the real RabbitMQ will not do on demand (answer with another protocol
version, cut its frames at every byte, hold an answer, cancel a consumer in the same
write as its consume-ok); everything else is tested on the real one."""

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pamqp.frame
from pamqp import commands
from yarl import URL

Connection = commands.Connection
After = Callable[["Session"], Awaitable[None]]


class Session:
    """One client connection to the scripted broker."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def read(self) -> tuple[int, Any]:
        head = await self.reader.readexactly(7)
        size = int.from_bytes(head[3:7], "big")
        rest = await self.reader.readexactly(size + 1)
        _, channel, frame = pamqp.frame.unmarshal(head + rest)
        return channel, frame

    async def read_method(self) -> Any:
        """The next frame that is not a heartbeat."""
        while True:
            _, frame = await self.read()
            if frame.name != "Heartbeat":
                return frame

    def send(self, frame: Any, channel: int = 0) -> None:
        self.writer.write(pamqp.frame.marshal(frame, channel))


class ScriptedBroker:
    def __init__(
        self,
        *,
        mechanisms: str = "PLAIN AMQPLAIN EXTERNAL",
        refuse_login: bool = False,
        answer_header: bytes | None = None,
        after: After | None = None,
        server_properties: dict[str, Any] | None = None,
    ) -> None:
        self.server_properties = server_properties or {"product": "scripted"}
        self.mechanisms = mechanisms
        self.refuse_login = refuse_login
        self.answer_header = answer_header
        self.after = after
        self.header = b""
        self.start_ok: Any = None
        self.tune_ok: Any = None
        self.open: Any = None
        self.done = asyncio.Event()
        self._server: asyncio.Server | None = None

    def url(self, query: str = "") -> URL:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return URL(f"amqp://worker:s3cret@127.0.0.1:{port}/jobs{query}")

    async def __aenter__(self) -> "ScriptedBroker":
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._server is not None
        self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        session = Session(reader, writer)
        try:
            await self._script(session)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client went away: the test says whether it should have
        finally:
            self.done.set()
            writer.close()

    async def _script(self, session: Session) -> None:
        self.header = await session.reader.readexactly(8)
        if self.answer_header is not None:
            session.writer.write(self.answer_header)
            return
        session.send(
            Connection.Start(server_properties=self.server_properties, mechanisms=self.mechanisms)
        )
        self.start_ok = await session.read_method()
        if self.refuse_login:
            session.send(Connection.Close(403, "ACCESS_REFUSED - Login was refused", 0, 0))
            await session.read_method()  # close-ok
            return
        session.send(Connection.Tune(channel_max=2047, frame_max=131072, heartbeat=60))
        self.tune_ok = await session.read_method()
        self.open = await session.read_method()
        session.send(Connection.OpenOk())
        if self.after is not None:
            await self.after(session)
