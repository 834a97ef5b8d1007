"""The broker engine: re-render through the worker fleet, over RabbitMQ.

Jobs are published to the request queue (publisher confirms, persistent) with at most
`window` input lines between the first unwritten one and the newest published one:
that bounds the reorder buffer and the load put on the fleet. Replies come back on an
exclusive queue of this run, matched by correlation id (`<run token>.<sequence>`). The
connection, channel, reply queue and publishing are the producers' link `PromptClient`
uses (transport/producers/rpc.py). A lost connection is followed by a reconnect, round the
broker's addresses from the next node on (a cluster's node that died is left for
another); once the reply queue is back, every job still without a reply is published
again (replies sent meanwhile went nowhere), without counting as one of its attempts.
While the link is down, no job's time runs out. The run ends (a resume finishes the
file) only when every address failed `RECONNECT_ROUNDS` times in a row, when the broker
refuses the credentials, or when it closes the run's channel under a connection that
stays up (it refused something: trying again would be refused again). A reply queue
deleted under the run is declared again by the link, and what was waiting published
again.

Delivery is at-least-once: a worker killed mid-job has its job redelivered, and a job
without a reply within `timeout` is published once more, so a reply can arrive twice;
only the first is used. A job still without a reply after its second attempt becomes
an error record with code `timeout`. Nothing is dropped silently: every input line
gets a record, in input order. Each publish expires (its `expiration`) when the run
would give up on the job, so no job outlives the run in the request queue.

Bad input lines are never published (they would only be dead-lettered): they get the
same error records the local engine writes. Nor is a job above the fleet's size limit
(`max_message_bytes`, serve's default unless told): it gets the `payload_too_large`
record the worker would answer.
"""

import asyncio
import contextlib
import os
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiormq
import orjson

from schemas.budget import Budget
from schemas.codes import ErrorCode
from worker.errors import ConfigError
from worker.ops.logs import silence_broker_libraries
from worker.ops.tracing import start_tracing
from worker.render.replies import DEFAULT_MAX_MESSAGE_BYTES, payload_too_large
from worker.rerender.lines import Block, Line, bad_line_reply, parse_line, split_lines
from worker.rerender.records import ChunkBuilder
from worker.rerender.sink import EngineError, Input, Sink
from worker.transport.event_loop import loop_factory, run_on
from worker.transport.link.addresses import SEPARATOR, first_address, redact_addresses
from worker.transport.link.broker_failures import connect_failure
from worker.transport.link.tls import TlsFiles, connect_kwargs
from worker.transport.producers.rpc import LinkDown, Reconnect, RpcLink
from worker.transport.settings import EventLoopName

if TYPE_CHECKING:
    # Only with tracing on is OpenTelemetry imported (worker.ops.tracing).
    from worker.ops.otel import JobTracing

DEFAULT_WINDOW = 256
DEFAULT_TIMEOUT = 60.0
CONNECT_TIMEOUT = 10.0
ATTEMPTS = 2
# After a lost connection, how many times each address is tried in a row before the run
# ends (with the pauses between attempts, a few seconds for a broker that is gone).
RECONNECT_ROUNDS = 2
# After Ctrl-C, wait this long at most for replies already under way, so the fleet's
# answers are not published to a reply queue that no longer exists.
STOP_GRACE_SECONDS = 10.0
_TICK_SECONDS = 0.1
# Records handed to the sink at once (besides every tick).
_EMIT_RECORDS = 512


@dataclass(slots=True)
class _Pending:
    """One input line between reading and writing."""

    line: Line | None  # None: a blank line, written as nothing
    end_offset: int
    attempts: int = 0
    # When the current attempt counts as lost; None while its publish awaits a confirm.
    deadline: float | None = None
    last_failure: str | None = None
    reply: dict[str, Any] | None = None
    done: bool = False


class BrokerEngine:
    name = "broker"

    def __init__(
        self,
        url: str,
        request_queue: str,
        *,
        window: int = DEFAULT_WINDOW,
        timeout: float = DEFAULT_TIMEOUT,
        default_budget: Budget | None = None,
        tls: TlsFiles | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        event_loop: EventLoopName = "auto",
        credentials_in: str | None = None,
    ) -> None:
        self.url = url
        # Where refused credentials are fixed (`where_credentials_are`), for the message.
        self.credentials_in = credentials_in
        self.max_message_bytes = max_message_bytes
        # As `serve` runs (its settings, its variables): the client's CPU per job is of
        # the same kind as a worker's, publishing, framing and matching replies.
        self._loop_factory = loop_factory(event_loop)  # raises EventLoopUnavailable
        # Written into every job that has no budget of its own (rerender --budget).
        self.default_budget = (
            None if default_budget is None else default_budget.model_dump(mode="json")
        )
        self.request_queue = request_queue
        self.window = max(1, window)
        self.timeout = timeout
        self.published = 0
        self.retries = 0
        self.timeouts = 0
        self.duplicates = 0
        self._token = uuid.uuid4().hex
        self._pending: dict[int, _Pending] = {}
        self._next_seq = 0
        self._next_write = 0
        self._builder: ChunkBuilder | None = None
        self._built = 0
        self._last_offset = 0
        self._room = asyncio.Event()
        self._failure: str | None = None
        self._closing = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._sink: Sink | None = None
        # Publishes so far, for a message id unique to each (aiormq matches a returned
        # job to its publish by message id).
        self._sends = 0
        self._tracing: JobTracing | None = None
        addresses = len(url.split(SEPARATOR))
        self._link = RpcLink(
            url,
            request_queue,
            f"prompt-worker.rerender.{self._token}",
            self._on_reply,
            reconnect=Reconnect(
                give_up_after=RECONNECT_ROUNDS * addresses, channel_errors_final=True
            ),
            connect_kwargs=connect_kwargs(first_address(url), tls),
            on_resumed=self._resend_waiting,
            on_failed=self._on_link_failed,
        )

    def describe(self) -> dict[str, Any]:
        return {
            "engine": self.name,
            "broker": {
                "url": redact_addresses(self.url),
                "request_queue": self.request_queue,
                "window": self.window,
                "timeout_s": self.timeout,
                "max_message_bytes": self.max_message_bytes,
                "event_loop": self.event_loop,
                "published": self.published,
                "retries": self.retries,
                "timeouts": self.timeouts,
                "duplicate_replies": self.duplicates,
                "reconnects": self._link.reconnects,
            },
        }

    @property
    def event_loop(self) -> str:
        return "asyncio" if self._loop_factory is None else "uvloop"

    def run(self, source: Input, sink: Sink, stop: threading.Event) -> None:
        try:
            # Each job's publish is a span when OTEL_* turns tracing on (TRACING.md).
            self._tracing = start_tracing(os.environ)
        except ConfigError as exc:
            raise EngineError(f"tracing: {exc}") from None
        try:
            run_on(self._loop_factory, self._run(source.reader.blocks(), sink, stop))
        finally:
            if self._tracing is not None:
                self._tracing.shutdown()
        if self._failure is not None:
            raise EngineError(self._failure)

    # -- connection ------------------------------------------------------------------

    async def _connect(self) -> None:
        silence_broker_libraries()
        where = redact_addresses(self.url)
        try:
            await self._link.open(timeout=CONNECT_TIMEOUT)
            return
        except TimeoutError:
            message = f"cannot reach the broker at {where}: no answer within {CONNECT_TIMEOUT:g} s"
        except Exception as exc:  # refused, DNS, TLS, authentication: all one message
            message = connect_failure(where, exc, fix_in=self.credentials_in)
        with contextlib.suppress(Exception):  # connected, then failed: nothing to keep
            await self._link.close()
        raise EngineError(message)

    async def _check_request_queue(self, sink: Sink) -> None:
        # A passive declare on a throwaway channel: a missing queue closes that channel.
        # Declaring it here instead would need the fleet's exact queue arguments.
        probe = await self._link.connection.channel()
        try:
            declared = await probe.queue_declare(self.request_queue, passive=True)
        except aiormq.exceptions.ChannelNotFoundEntity:
            raise EngineError(
                f"the request queue {self.request_queue!r} does not exist on "
                f"{redact_addresses(self.url)}: start `prompt-worker serve` (it declares the queue) "
                "or pass the fleet's --request-queue"
            ) from None
        if not probe.is_closed:
            await probe.close()
        if not declared.consumer_count:
            sink.warn(
                f"no worker is consuming {self.request_queue!r} yet: jobs wait in the queue; "
                f"one without a reply after {ATTEMPTS} x {self.timeout:g} s is recorded as a timeout"
            )

    def _on_link_failed(self, exc: BaseException) -> None:
        """The link gave up: the run ends, and a resume finishes the file."""
        if self._closing or self._failure is not None:
            return
        reason = f": {exc}" if str(exc) else f": {type(exc).__name__}"
        if isinstance(exc, aiormq.exceptions.ChannelClosed):
            self._failure = f"the broker closed the run's channel{reason}"
        else:
            where = self._link.address
            self._failure = f"lost the connection to the broker; {connect_failure(where, exc)}"
        self._room.set()

    def _resend_waiting(self) -> None:
        """The link is back: replies sent while it was away went nowhere, so every job
        still without a reply is published again (not one of its attempts)."""
        for seq, pending in self._pending.items():
            if pending.done or pending.line is None or pending.line.body is None:
                continue
            if pending.attempts == 0:
                continue  # its first publish is still to come
            pending.deadline = None
            self._publish(seq, pending, again=True)
        self._room.set()

    # -- the run -----------------------------------------------------------------------

    async def _run(self, blocks: Iterator[Block], sink: Sink, stop: threading.Event) -> None:
        self._room = asyncio.Event()
        self._sink = sink
        await self._connect()
        try:
            await self._check_request_queue(sink)
            ticker = asyncio.create_task(self._tick(sink, stop))
            try:
                await self._feed(blocks, sink, stop)
                await self._drain(stop)
            finally:
                ticker.cancel()
                await asyncio.gather(ticker, return_exceptions=True)
                self._flush(sink)
                self._emit(sink)
        finally:
            self._closing = True
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            with contextlib.suppress(Exception):  # already lost: nothing left to close
                await self._link.close()

    async def _feed(self, blocks: Iterator[Block], sink: Sink, stop: threading.Event) -> None:
        """Read lines and publish their jobs, never more than `window` ahead of the writer."""
        for block in blocks:
            offset = block.end_offset - len(block.data)
            for raw in split_lines(block.data):
                offset += len(raw) + 1
                while len(self._pending) >= self.window and not self._halted(stop):
                    self._room.clear()
                    await self._room.wait()
                if self._halted(stop):
                    return
                seq = self._next_seq
                self._next_seq += 1
                end = min(offset, block.end_offset)
                if not raw.strip():
                    self._pending[seq] = _Pending(None, end, done=True)
                    continue
                line = parse_line(raw, self.default_budget)
                pending = _Pending(line, end)
                self._pending[seq] = pending
                if line.body is None:
                    pending.reply, pending.done = bad_line_reply(line), True
                elif len(line.body) > self.max_message_bytes:
                    # Answered here as the worker answers it unread (and as the local
                    # engine writes it). Published, a job above the broker's own limit
                    # would close the run's channel and end the run, on every resume.
                    reply = payload_too_large(len(line.body), self.max_message_bytes)
                    pending.reply, pending.done = orjson.loads(reply.body), True
                else:
                    self._publish(seq, pending)
            self._flush(sink)

    def _halted(self, stop: threading.Event) -> bool:
        return stop.is_set() or self._failure is not None

    async def _drain(self, stop: threading.Event) -> None:
        """Wait until every line is written, the run failed, or a stop's grace ran out."""
        loop = asyncio.get_running_loop()
        grace_until: float | None = None
        while self._pending and self._failure is None:
            if stop.is_set():
                if grace_until is None:
                    grace_until = loop.time() + min(self.timeout, STOP_GRACE_SECONDS)
                in_flight = any(p.line is not None and not p.done for p in self._pending.values())
                if not in_flight or loop.time() >= grace_until:
                    return
            self._room.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._room.wait(), _TICK_SECONDS)

    def _publish(self, seq: int, pending: _Pending, *, again: bool = False) -> None:
        task = asyncio.create_task(self._publish_once(seq, pending, again=again))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _publish_once(self, seq: int, pending: _Pending, *, again: bool = False) -> None:
        """One attempt at a job (`again`: the same attempt, published anew after the
        link came back)."""
        line = pending.line
        if pending.done or line is None or line.body is None:
            return  # answered between the retry's scheduling and now
        if not again:
            pending.attempts += 1
        pending.deadline = None
        correlation_id = f"{self._token}.{seq}"
        self._sends += 1
        loop = asyncio.get_running_loop()
        sent = None if self._tracing is None else self._tracing.send(self.request_queue)
        try:
            # Returns once the broker has the job; a nack or an unroutable job raises.
            await self._link.publish(
                line.body,
                correlation_id,
                message_id=f"{correlation_id}.{self._sends}",
                timeout=self.timeout,
                headers=None if sent is None else sent.headers,
                expires_after=self._time_left(pending),
            )
        except LinkDown as exc:
            if sent is not None:
                sent.end(exc)
            return  # no deadline: the link's return publishes it again
        except Exception as exc:  # nack, unroutable, timeout: this attempt is lost
            if sent is not None:
                sent.end(exc)
            if not self._link.connected:
                return  # lost with the connection: the link's return publishes it again
            pending.last_failure = f"publish failed: {exc or type(exc).__name__}"
            pending.deadline = loop.time()
            return
        if sent is not None:
            sent.end()
        self.published += 1
        pending.deadline = loop.time() + self.timeout

    def _time_left(self, pending: _Pending) -> float:
        """How long this run still waits for the job: the attempts left, a timeout each.
        The job is published to expire then, so that a job the run gives up on does not
        outlive it in the request queue, to be rendered later (by a worker that was down
        or busy) for a reply queue that is gone."""
        return self.timeout * (ATTEMPTS - pending.attempts + 1)

    def _on_reply(self, correlation_id: str | None, body: bytes) -> None:
        token, _, seq_text = (correlation_id or "").rpartition(".")
        seq = int(seq_text) if token == self._token and seq_text.isdigit() else -1
        pending = self._pending.get(seq)
        if pending is None or pending.done:
            # Already answered (at-least-once delivery or a retry's twin): keep the first.
            self.duplicates += 1
            return
        try:
            reply = orjson.loads(body)
            if not isinstance(reply, dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:
            line = pending.line
            reply = {
                "job_id": line.job_id if line else None,
                "status": "error",
                "kind": line.kind if line else None,
                "error": {
                    "code": ErrorCode.INTERNAL.value,
                    "message": f"unreadable reply from the worker: {exc}",
                    "details": [],
                },
            }
        pending.reply, pending.done = reply, True
        if pending.line is not None:
            pending.line.body = None  # the job is answered; free it before it is written
        if self._sink is not None:
            self._flush(self._sink)
        self._room.set()

    async def _tick(self, sink: Sink, stop: threading.Event) -> None:
        """Retries, timeouts and writing, every tick."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(_TICK_SECONDS)
            now = loop.time()
            # No job's time runs out while the link is down: its return publishes every
            # waiting job again, with a fresh deadline.
            link_up = self._link.is_up
            for seq, pending in self._pending.items():
                if pending.done or pending.deadline is None or now < pending.deadline:
                    continue
                if stop.is_set() or not link_up:
                    continue  # no new attempts once the operator asked to stop, nor now
                if pending.attempts < ATTEMPTS:
                    self.retries += 1
                    self._publish(seq, pending)
                else:
                    self.timeouts += 1
                    pending.reply, pending.done = self._timeout_reply(pending), True
            self._flush(sink)
            self._emit(sink)
            if stop.is_set():
                self._room.set()

    def _timeout_reply(self, pending: _Pending) -> dict[str, Any]:
        line = pending.line
        assert line is not None
        reason = pending.last_failure or f"no reply within {self.timeout:g} s"
        return {
            "job_id": line.job_id,
            "status": "error",
            "kind": line.kind,
            "error": {
                "code": ErrorCode.TIMEOUT.value,
                "message": f"{reason} (after {pending.attempts} attempts)",
                "details": [],
            },
        }

    def _flush(self, sink: Sink) -> None:
        """Move the answered lines at the head, in order, into the chunk being built."""
        while True:
            pending = self._pending.get(self._next_write)
            if pending is None or not pending.done:
                break
            del self._pending[self._next_write]
            self._next_write += 1
            if self._builder is None:
                self._builder = ChunkBuilder(sink.diff_budget())
            if pending.line is None:
                self._builder.blank()
            else:
                assert pending.reply is not None
                self._builder.add(pending.line, pending.reply)
            self._built += 1
            self._last_offset = pending.end_offset
            self._room.set()
        if self._built >= _EMIT_RECORDS:
            self._emit(sink)

    def _emit(self, sink: Sink) -> None:
        if self._builder is None:
            return
        builder, self._builder, self._built = self._builder, None, 0
        sink.accept(builder.result(self._last_offset))
