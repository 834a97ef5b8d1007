"""The end of a connection or a channel: whether it came, why, and who waits for it."""

import asyncio


class Closing:
    """Closed once, with why (None: closed by the worker); each observer is a future of
    its own, so cancelling one cancels nothing else."""

    __slots__ = ("_loop", "_waiting", "is_closed", "why")

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._waiting: list[asyncio.Future[None]] = []
        self.is_closed = False
        self.why: BaseException | None = None

    def observer(self) -> "asyncio.Future[None]":
        """A new future, done at the close (raising why, unless the worker closed it)."""
        observer: asyncio.Future[None] = self._loop.create_future()
        if self.is_closed:
            self._tell(observer)
        else:
            self._waiting.append(observer)
        return observer

    def close(self, why: BaseException | None) -> bool:
        """Closed now, the observers told; False if it was closed already."""
        if self.is_closed:
            return False
        self.is_closed = True
        self.why = why
        for observer in self._waiting:
            self._tell(observer)
        self._waiting.clear()
        return True

    def _tell(self, observer: "asyncio.Future[None]") -> None:
        if observer.done():
            return
        if self.why is None:
            observer.set_result(None)
        else:
            observer.set_exception(self.why)


class Closable:
    """What a connection and a channel say of their end (`ended`, set by each)."""

    ended: Closing

    @property
    def closing(self) -> "asyncio.Future[None]":
        """A new future, done when it closes (raising why, unless the worker closed it);
        cancelling it cancels only this observer."""
        return self.ended.observer()

    @property
    def is_closed(self) -> bool:
        return self.ended.is_closed

    @property
    def closed_by(self) -> BaseException | None:
        """Why it closed (None: closed by the worker, or still open)."""
        return self.ended.why
