"""How the archive's reader and recorder get a connection: a callable they call again
whenever they need one (at the start and after a lost link), so that the caller decides
the addresses, TLS and the connection's name."""

from collections.abc import Awaitable, Callable

from aiormq.abc import AbstractConnection

Connect = Callable[[], Awaitable[AbstractConnection]]
