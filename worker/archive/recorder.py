"""The worker's side of the archive: one record per answered job, published on a stream.

`ArchiveRecorder.record(outcome)` is awaited between a job's confirmed reply and its
acknowledgement (worker.transport.consumer.delivery). It never raises and never takes
longer than the confirm timeout: the record is published on a connection and channel of
the recorder's own (aiormq, publisher confirms), and its confirm awaited until the
deadline; past it, or when the stream is missing, refused or the connection is down,
the job is acknowledged all the same and the record counted lost by outcome
(`prompt_worker_archive_records_total{outcome}`, docs/ARCHIVE.md "Outcomes"):

* `written`: the stream confirmed it;
* `timeout`: no confirm by the deadline (a slow or stalled broker); the record may
  still be written, late;
* `refused`: the broker nacked it, refused the user access to the stream, or refused
  the record itself (larger than its message size limit);
* `unroutable`: returned (mandatory): no stream of that name (deleted under the worker);
  the recorder declares it again, at most every `REDECLARE_PAUSE` seconds;
* `closed`: no connection to the broker, or it closed, until the deadline;
* `failed`: the record could not be built (a bug of ours); the job is unaffected.

Each cause is logged once (`archive_record_lost`, with the outcome and the broker's
words, never payload text) until a record is written again (`archive_recording_again`).
The connection is kept by a task of the recorder's own, which reconnects with backoff and
declares the stream; a declaration the broker refuses (a stream declared with other
settings, no configure permission) is logged once and recording goes on.
"""

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any

from aiormq.abc import AbstractChannel, AbstractConnection
from aiormq.exceptions import (
    ChannelAccessRefused,
    ChannelClosed,
    ChannelPreconditionFailed,
    DeliveryError,
    PublishError,
)
from pamqp.commands import Basic
from structlog.typing import FilteringBoundLogger

from worker.archive.connect import Connect
from worker.archive.record import (
    RecordCompressor,
    RecordFacts,
    record_json,
    record_properties,
    session_id_of,
)
from worker.families import family_name
from worker.ops.metrics import Metrics
from worker.render.replies import RenderOutcome
from worker.tasks import cancel_for_good

# A stream that returned a record is declared again at most this often.
REDECLARE_PAUSE = 30.0
# After the broker refused the user access to the stream (which closes the channel),
# records are counted `refused` for this long without a publish: one channel a record
# would be opened and closed otherwise.
REFUSED_PAUSE = 10.0
# Reconnect backoff: first pause and cap, in seconds (a short cap: records are lost
# while the archive is down, so it comes back soon after the broker does).
RECONNECT_FIRST = 0.5
RECONNECT_CAP = 5.0
OUTCOMES = ("written", "timeout", "refused", "unroutable", "closed", "failed")


@dataclass(frozen=True, slots=True)
class ArchiveSettings:
    stream: str
    max_age: str  # x-max-age, e.g. "7D"
    max_bytes: int  # x-max-length-bytes
    confirm_timeout: float  # seconds

    def arguments(self) -> dict[str, Any]:
        """The stream's declaration arguments (the deploy files declare the same)."""
        return {
            "x-queue-type": "stream",
            "x-max-age": self.max_age,
            "x-max-length-bytes": self.max_bytes,
        }


class ArchiveRecorder:
    """Publishes archive records; `start()` once in the event loop, `close()` at the end."""

    def __init__(
        self,
        settings: ArchiveSettings,
        connect: Connect,
        metrics: Metrics,
        log: FilteringBoundLogger,
        worker_version: str,
    ) -> None:
        self.settings = settings
        self._connect = connect
        self.metrics = metrics
        self.log = log.bind(stream=settings.stream)
        self.worker_version = worker_version
        self._compressor = RecordCompressor()
        self._outcomes = {name: metrics.archive_records.labels(outcome=name) for name in OUTCOMES}
        self._channel: AbstractChannel | None = None
        self._connection: AbstractConnection | None = None
        self._up = asyncio.Event()
        # time.monotonic() since when there is no channel to publish on.
        self._down_since = time.monotonic()
        self._lost_channel = asyncio.Event()
        self._keeping: asyncio.Task[None] | None = None
        self._closing = False
        self._logged: set[str] = set()  # causes logged since the last written record
        self._redeclare_after = 0.0
        self._refused_until = 0.0
        self.declared = False  # the last declaration was accepted
        self.last_problem: str | None = None  # the last lost record's outcome
        self.lost = dict.fromkeys(OUTCOMES[1:], 0)

    def start(self) -> None:
        self._down_since = time.monotonic()
        self._keeping = asyncio.create_task(self._keep())

    async def wait_up(self, seconds: float) -> bool:
        """Wait until records can be published, at most `seconds`."""
        try:
            await asyncio.wait_for(self._up.wait(), seconds)
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        self._closing = True
        if self._keeping is not None:
            await cancel_for_good(self._keeping)
            with contextlib.suppress(asyncio.CancelledError):
                await self._keeping
        if self._connection is not None:
            with contextlib.suppress(Exception):
                await self._connection.close()

    def status(self) -> dict[str, Any]:
        """What /readyz says of the archive (it never makes the worker unready)."""
        return {
            "stream": self.settings.stream,
            "connected": self._channel is not None,
            "recording": self._channel is not None and self.last_problem is None,
            "last_problem": self.last_problem,
            # Records lost since the worker started, by outcome (those not 0).
            "lost": {name: count for name, count in self.lost.items() if count},
        }

    # -- recording ---------------------------------------------------------------

    async def record(self, outcome: RenderOutcome) -> None:
        """Publish `outcome`'s record and wait for its confirm, bounded; never raises."""
        deadline = time.monotonic() + self.settings.confirm_timeout
        try:
            data, properties = self._encode(outcome)
            body = await self._compressor.compress_async(data)
        except Exception as exc:  # a bug of ours: the job goes on without its record
            self._lost("failed", error=repr(exc))
            return
        result, detail = await self._publish(body, properties, deadline)
        if result == "written":
            self._outcomes["written"].inc()
            if self._logged:
                self.log.info("archive_recording_again", after=sorted(self._logged))
                self._logged.clear()
            self.last_problem = None
        else:
            self._lost(result, error=detail)

    def _encode(self, outcome: RenderOutcome) -> tuple[bytes, Basic.Properties]:
        """The record's uncompressed JSON and its properties."""
        now = time.time()
        job = outcome.job
        facts = RecordFacts(
            job=job,
            tools_json=outcome.tools_json,
            kind=outcome.kind,
            # An error reply names no family; its job's kind, when it is one, does.
            family=outcome.family or family_name(outcome.kind),
            session_id=session_id_of(job),
        )
        data = record_json(facts, outcome.body, now, self.worker_version)
        properties = record_properties(facts, outcome.status, outcome.job_id, now)
        return data, properties

    async def _publish(
        self, body: bytes, properties: Basic.Properties, deadline: float
    ) -> tuple[str, str | None]:
        """(outcome, the broker's words) of publishing one record by `deadline`."""
        result, detail = "closed", "no connection to the broker"
        while (remaining := deadline - time.monotonic()) > 0:
            if time.monotonic() < self._refused_until:
                return "refused", "access to the stream refused"
            channel = self._channel
            if channel is None or channel.is_closed:
                if self._down_since < time.monotonic() - self.settings.confirm_timeout:
                    # Down for longer than a record may wait: waiting again would only
                    # slow every job to one a timeout; the records are lost until it is up.
                    return result, detail
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._up.wait(), remaining)
                continue
            try:
                await channel.basic_publish(
                    body,
                    routing_key=self.settings.stream,
                    properties=properties,
                    mandatory=True,
                    timeout=remaining,
                )
            except TimeoutError:
                return "timeout", f"no confirm within {self.settings.confirm_timeout:g} s"
            except PublishError as exc:
                self._stream_missing()
                return "unroutable", _words(exc)
            except DeliveryError as exc:
                # A nack: the stream could not take it (e.g. no leader for a moment).
                result, detail = "refused", _words(exc)
                await asyncio.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if isinstance(exc, ChannelAccessRefused):
                    self._refused_until = time.monotonic() + REFUSED_PAUSE
                    self._channel_lost(channel)
                    return "refused", _words(exc)
                if isinstance(exc, ChannelPreconditionFailed):
                    # This record itself was refused (e.g. above the broker's message
                    # size limit): publishing it again would only close channels.
                    self._channel_lost(channel)
                    return "refused", _words(exc)
                # The channel or connection went: publish again once it is back.
                result, detail = "closed", _words(exc)
                self._channel_lost(channel)
            else:
                return "written", None
        return result, detail

    def _lost(self, outcome: str, error: str | None) -> None:
        self._outcomes[outcome].inc()
        self.lost[outcome] += 1
        self.last_problem = outcome
        if outcome not in self._logged:
            self._logged.add(outcome)
            self.log.warning("archive_record_lost", outcome=outcome, error=error)

    def _stream_missing(self) -> None:
        now = time.monotonic()
        if now >= self._redeclare_after and self._channel is not None:
            self._redeclare_after = now + REDECLARE_PAUSE
            asyncio.get_running_loop().create_task(self._redeclare())

    async def _redeclare(self) -> None:
        channel = self._channel
        if channel is None:
            return
        if not await self._declare(channel):
            self._channel_lost(channel)

    def _channel_lost(self, channel: AbstractChannel) -> None:
        if self._channel is channel:
            self._went_down()
            self._lost_channel.set()

    def _went_down(self) -> None:
        if self._channel is not None or self._up.is_set():
            self._down_since = time.monotonic()
        self._channel = None
        self._up.clear()

    # -- the connection ----------------------------------------------------------

    async def _keep(self) -> None:
        """Connect, open a confirming channel, declare the stream; again when lost."""
        pause = RECONNECT_FIRST
        while not self._closing:
            try:
                connection = self._connection
                if connection is None or connection.is_closed:
                    connection = self._connection = await self._connect()
                channel = await connection.channel(publisher_confirms=True)
                if not await self._declare(channel):
                    # The declaration closed the channel; records go to what exists.
                    channel = await connection.channel(publisher_confirms=True)
                self._lost_channel.clear()
                self._channel = channel
                self._up.set()
                pause = RECONNECT_FIRST
                await self._until_lost(connection, channel)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._log_once("archive_connection_failed", error=_words(exc))
                await asyncio.sleep(pause)
                pause = min(pause * 2, RECONNECT_CAP)
            finally:
                self._went_down()

    async def _until_lost(self, connection: AbstractConnection, channel: AbstractChannel) -> None:
        lost = asyncio.ensure_future(self._lost_channel.wait())
        watched = [connection.closing, channel.closing, lost]
        try:
            await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for future in watched:
                future.cancel()
        if connection.is_closed:
            self._log_once("archive_connection_lost", error="connection closed")

    async def _declare(self, channel: AbstractChannel) -> bool:
        """Declare the stream; False when the broker refused (which closes the channel)."""
        try:
            await channel.queue_declare(
                self.settings.stream, durable=True, arguments=self.settings.arguments()
            )
        except ChannelClosed as exc:
            self.declared = False
            self._log_once(
                "archive_stream_not_declared",
                error=_words(exc),
                conflict=isinstance(exc, ChannelPreconditionFailed),
            )
            return False
        self.declared = True
        return True

    def _log_once(self, event: str, **fields: Any) -> None:
        if event not in self._logged:
            self._logged.add(event)
            self.log.warning(event, **fields)


def _words(exc: BaseException) -> str:
    """The broker's or the library's words for a failure: never the record (a returned
    message's body is not quoted, only the frame's reply text)."""
    if isinstance(exc, PublishError | DeliveryError):
        text = getattr(exc.frame, "reply_text", None)
        return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return f"{type(exc).__name__}: {exc}"[:300]
