"""Progress for the operator: a rich bar on a terminal, structured log lines elsewhere.

Progress is measured in input bytes (known from the file size without reading the file
twice), so the ETA is honest for a million-line file; job counts and rates are shown
beside it. The bar refreshes only when updated (no refresh thread): the local engine
forks its render processes after the display exists, and forking next to a running
thread is unsafe.
"""

import sys
import time
from typing import Protocol, TextIO

import orjson
from rich.console import Console
from rich.progress import (
    BarColumn,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as RichProgress

MODES = ("auto", "bar", "log", "off")
_BAR_REFRESH_SECONDS = 0.1


class Progress(Protocol):
    def update(self, *, jobs: int, offset: int, errors: int, changed: int) -> None: ...

    def note(self, message: str) -> None: ...

    def close(self) -> None: ...


class _Clock:
    def __init__(self, total_bytes: int | None, start_offset: int) -> None:
        self.total = total_bytes
        self.start_offset = start_offset
        self.started = time.monotonic()

    def rate(self, jobs: int) -> float:
        elapsed = time.monotonic() - self.started
        return jobs / elapsed if elapsed > 0 else 0.0

    def eta(self, offset: int) -> float | None:
        done = offset - self.start_offset
        if self.total is None or done <= 0:
            return None
        elapsed = time.monotonic() - self.started
        return max(0.0, elapsed * (self.total - offset) / done)


class BarProgress:
    def __init__(
        self, total_bytes: int | None, start_offset: int, stream: TextIO, label: str = "rerender"
    ) -> None:
        self._clock = _Clock(total_bytes, start_offset)
        self._console = Console(file=stream)
        self._bar = RichProgress(
            TextColumn(f"[bold]{label}"),
            BarColumn(),
            TaskProgressColumn(),
            TextColumn("{task.fields[jobs]:,} jobs"),
            TextColumn("{task.fields[rate]:,.0f} jobs/s"),
            TextColumn("[red]{task.fields[errors]:,} errors"),
            TextColumn("{task.fields[changed]:,} changed"),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self._console,
            auto_refresh=False,
        )
        self._task = self._bar.add_task(
            "rerender",
            total=total_bytes,
            completed=start_offset,
            jobs=0,
            rate=0.0,
            errors=0,
            changed=0,
        )
        self._last_refresh = 0.0
        self._bar.start()

    def update(self, *, jobs: int, offset: int, errors: int, changed: int) -> None:
        self._bar.update(
            self._task,
            completed=offset,
            jobs=jobs,
            rate=self._clock.rate(jobs),
            errors=errors,
            changed=changed,
        )
        now = time.monotonic()
        if now - self._last_refresh >= _BAR_REFRESH_SECONDS:
            self._last_refresh = now
            self._bar.refresh()

    def note(self, message: str) -> None:
        self._bar.console.print(message, markup=False, highlight=False)

    def close(self) -> None:
        self._bar.refresh()
        self._bar.stop()


class LogProgress:
    """One JSON object per line on `stream`, every `interval` seconds and at the end of
    a run that got as far as its first chunk (a run that could not start, e.g. with the
    broker unreachable, ends with its error line alone)."""

    def __init__(
        self, total_bytes: int | None, start_offset: int, stream: TextIO, interval: float
    ) -> None:
        self._clock = _Clock(total_bytes, start_offset)
        self._stream = stream
        self._interval = interval
        self._last = time.monotonic()
        self._state = {"jobs": 0, "offset": start_offset, "errors": 0, "changed": 0}
        self._updated = False

    def _emit(self, event: str, **fields: object) -> None:
        record = {"ts": round(time.time(), 3), "event": event, **fields}
        self._stream.write(orjson.dumps(record).decode() + "\n")
        self._stream.flush()

    def _progress(self) -> None:
        jobs, offset = self._state["jobs"], self._state["offset"]
        total = self._clock.total
        eta = self._clock.eta(offset)
        self._emit(
            "rerender.progress",
            jobs=jobs,
            jobs_per_s=round(self._clock.rate(jobs), 1),
            errors=self._state["errors"],
            changed=self._state["changed"],
            percent=round(100 * offset / total, 1) if total else None,
            eta_s=round(eta) if eta is not None else None,
        )

    def update(self, *, jobs: int, offset: int, errors: int, changed: int) -> None:
        self._state = {"jobs": jobs, "offset": offset, "errors": errors, "changed": changed}
        self._updated = True
        now = time.monotonic()
        if now - self._last >= self._interval:
            self._last = now
            self._progress()

    def note(self, message: str) -> None:
        self._emit("rerender.warning", message=message)

    def close(self) -> None:
        if self._updated:
            self._progress()


class NoProgress:
    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def update(self, *, jobs: int, offset: int, errors: int, changed: int) -> None:
        pass

    def note(self, message: str) -> None:
        self._stream.write(f"rerender: {message}\n")
        self._stream.flush()

    def close(self) -> None:
        pass


def make_progress(
    mode: str,
    *,
    total_bytes: int | None,
    start_offset: int,
    interval: float,
    stream: TextIO | None = None,
    label: str = "rerender",
) -> Progress:
    """`label` names the bar: what is being counted (the archive's read, the render)."""
    stream = stream if stream is not None else sys.stderr
    if mode == "auto":
        mode = "bar" if stream.isatty() else "log"
    if mode == "bar":
        return BarProgress(total_bytes, start_offset, stream, label)
    if mode == "log":
        return LogProgress(total_bytes, start_offset, stream, interval)
    return NoProgress(stream)
