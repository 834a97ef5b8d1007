"""The flags that choose records of the archive stream (`rerender`, `report`): SPEC §12."""

import argparse
import datetime
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from worker.rerender.archive_input import ArchiveSource
    from worker.transport.link.tls import TlsFiles

ARCHIVE_STREAM_ENV = "PROMPT_WORKER_ARCHIVE_STREAM"


class ArchiveArgumentError(ValueError):
    """A usage error of the archive flags: one line, exit 2."""


def add_archive_arguments(parser: argparse.ArgumentParser, purpose: str) -> None:
    group = parser.add_argument_group("archive", purpose)
    group.add_argument(
        "--from-archive",
        metavar="AMQP_URL",
        default=None,
        help="read the records of the archive stream on this broker instead of a file",
    )
    group.add_argument(
        "--archive-stream",
        metavar="NAME",
        default=None,
        # The default of worker/archive/record.py, named here: --help imports no client.
        help=f"the stream (${ARCHIVE_STREAM_ENV}; default build-prompt.archive)",
    )
    group.add_argument(
        "--since", metavar="WHEN", help="RFC 3339 time, or an age: 7d, 12h, 30m (required)"
    )
    group.add_argument(
        "--until", metavar="WHEN", help="default: the stream's end when the run starts"
    )
    for flag, dest in (("--kind", "kinds"), ("--family", "families"), ("--session", "sessions")):
        group.add_argument(
            flag, dest=dest, action="append", default=[], metavar="NAME", help="only these"
        )


def archive_source(args: argparse.Namespace, env: dict[str, str]) -> "ArchiveSource":
    """The stream, window and filters of the flags; raises ArchiveArgumentError."""
    from worker.archive.read_window import Window, WindowError, parse_when
    from worker.archive.reading import DEFAULT_STREAM
    from worker.rerender.archive_input import ArchiveSource
    from worker.transport.link.addresses import split_addresses
    from worker.transport.link.broker_failures import broker_address
    from worker.transport.link.tls import TlsFilesError, connect_kwargs
    from worker.transport.settings import parse_amqp_url

    try:
        urls = tuple(split_addresses(parse_amqp_url(args.from_archive)))
    except ValueError as exc:
        raise ArchiveArgumentError(f"--from-archive: {exc}") from None
    if not args.since:
        raise ArchiveArgumentError("--from-archive needs --since (RFC 3339, or 7d, 12h, 30m)")
    now = datetime.datetime.now(datetime.UTC)
    try:
        since = parse_when(args.since, now)
        until = parse_when(args.until, now) if args.until else None
    except WindowError as exc:
        raise ArchiveArgumentError(f"--since/--until: {exc}") from None
    if until is not None and until < since:
        raise ArchiveArgumentError("--until is before --since")
    stream = args.archive_stream or env.get(ARCHIVE_STREAM_ENV) or DEFAULT_STREAM
    window = Window(
        since=since,
        until=until,
        kinds=frozenset(args.kinds),
        families=frozenset(args.families),
        sessions=frozenset(args.sessions),
    )
    try:
        # One scheme for every address (split_addresses): the first one's TLS serves all.
        ssl_context = connect_kwargs(urls[0], _tls_files(args, env)).get("ssl_context")
    except TlsFilesError as exc:
        raise ArchiveArgumentError(f"--from-archive: {exc}") from None
    return ArchiveSource(
        urls=urls,
        stream=stream,
        window=window,
        where=", ".join(broker_address(url) for url in urls),
        ssl_context=ssl_context,
    )


def _tls_files(args: argparse.Namespace, env: dict[str, str]) -> "TlsFiles":
    """serve's TLS files: the --tls-* flags where the command has them, else the
    PROMPT_WORKER_TLS_* variables."""
    from worker.transport.link.tls import TlsFiles

    def pick(name: str) -> str | None:
        return getattr(args, name, None) or env.get(f"PROMPT_WORKER_{name.upper()}") or None

    return TlsFiles(pick("tls_ca_file"), pick("tls_cert_file"), pick("tls_key_file"))


def read_window(
    source: "ArchiveSource",
    output: str,
    *,
    resume: bool,
    progress: str,
    log_interval: float,
) -> dict[str, Any]:
    """Spool the window's records beside `output` (worker/rerender/archive_input.py);
    the read's state. Raises ArchiveArgumentError with the line an operator reads."""
    from worker.rerender.archive_input import read_archive

    with _read_errors(source):
        state = read_archive(
            source,
            output,
            resume=resume,
            progress_mode=progress,
            log_interval=log_interval,
            err=sys.stderr,
        )
    return state.as_json()


def read_fleet(source: "ArchiveSource", *, progress: str, log_interval: float) -> dict[str, Any]:
    """The fleet page's data of the window's records (worker/rerender/page/fleet_data.py)."""
    from worker.rerender.archive_input import ReadState, read_into
    from worker.rerender.page.fleet_data import FleetData

    state = ReadState(stream=source.stream, broker=source.where, window=source.window.describe())
    fleet = FleetData(state)
    with _read_errors(source):
        read_into(source, fleet, progress_mode=progress, log_interval=log_interval, err=sys.stderr)
    return fleet.page_data()


@contextmanager
def _read_errors(source: "ArchiveSource") -> Iterator[None]:
    """A failed read as one line (ArchiveArgumentError): what, where, and what to do."""
    from aiormq.exceptions import AMQPError

    from worker.archive.reading import ArchiveError
    from worker.ops.logs import silence_broker_libraries
    from worker.rerender.archive_input import ArchiveReadError
    from worker.transport.link.broker_failures import ConnectFailed, connect_failure

    silence_broker_libraries()
    try:
        yield
    except ArchiveReadError as exc:
        raise ArchiveArgumentError(f"{exc}; what was read is kept: --resume continues") from None
    except ArchiveError as exc:
        raise ArchiveArgumentError(f"{exc} (broker {source.where})") from None
    except (AMQPError, OSError, TimeoutError, ConnectFailed) as exc:
        raise ArchiveArgumentError(connect_failure(source.where, exc)) from None
