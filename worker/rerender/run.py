"""One rerender run: input -> engine -> ordered output, diffs, progress, report, exit code."""

import os
import signal
import stat
import sys
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, BinaryIO, TextIO

import orjson

from worker.rerender.drift import CHANGED, ERROR, DiffWriter
from worker.rerender.lines import BLOCK_BYTES, LineReader
from worker.rerender.output import OutputError, OutputFile, ResumePoint, resume_point
from worker.rerender.page.drift_page import write_page
from worker.rerender.page.page_data import PageError
from worker.rerender.progress import Progress, make_progress
from worker.rerender.records import ChunkResult, Tally
from worker.rerender.run_report import build_report, print_summary
from worker.rerender.sink import Engine, EngineError, Input

DEFAULT_DIFF_LIMIT = 100
# Bad lines are also listed in the report; on the terminal the first few are enough.
MAX_BAD_LINE_NOTES = 20

EXIT_OK = 0
EXIT_JOB_ERRORS = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class RerenderError(Exception):
    """A usage, input or configuration problem: one line for the operator, exit 2."""


@dataclass(frozen=True, slots=True)
class Options:
    input: str
    output: str
    report: str | None = None
    # The drift page (HTML), built from the input and output files at the end.
    html: str | None = None
    diff_dir: str | None = None
    # None: every changed job gets its diff.
    diff_limit: int | None = DEFAULT_DIFF_LIMIT
    resume: bool = False
    fail_on_drift: bool = False
    progress: str = "auto"
    log_interval: float = 10.0
    block_bytes: int = BLOCK_BYTES
    # Where the input came from when not a file of the operator's: the report's
    # `archive` section (rerender --from-archive).
    archive: dict[str, Any] | None = None


class OutputSink:
    """Writes chunks in order (whole lines only), tallies them, writes diffs, shows progress."""

    def __init__(
        self,
        output: OutputFile,
        *,
        resume_point: ResumePoint,
        resume: bool,
        diffs: DiffWriter,
        progress: Progress,
    ) -> None:
        self._output = output
        self._started = resume  # a resumed file is appended to, never truncated
        self.diffs = diffs
        self.progress = progress
        self.total = resume_point.tally
        self.run = Tally()
        # Input lines answered so far: chunks count their lines from here.
        self.lines = resume_point.lines
        self._bad_noted = 0

    def begin(self) -> None:
        """Start a fresh output (deferred so a run that cannot start leaves the file be)."""
        if not self._started:
            self._started = True
            self._output.truncate()

    def diff_budget(self) -> int:
        return self.diffs.budget()

    def output_fd(self) -> int:
        self.begin()
        return self._output.fd

    def accept(self, chunk: ChunkResult) -> None:
        self.begin()
        # Whole lines only: an interruption between chunks leaves a file of complete
        # records; a kill inside a write leaves a torn line that --resume cuts off.
        if not chunk.written:
            self._output.write(chunk.output)
        first = self.lines + 1
        self.lines += chunk.lines
        self.run.merge(chunk.tally, first)
        self.total.merge(chunk.tally, first)
        for diff in chunk.diffs:
            self.diffs.write(first + diff.line, diff.job_id, diff.kind, diff.text)
        for line, reason in chunk.tally.bad_samples:
            if self._bad_noted < MAX_BAD_LINE_NOTES:
                self.progress.note(f"bad input line {first + line}: {reason}")
            elif self._bad_noted == MAX_BAD_LINE_NOTES:
                self.progress.note("more bad input lines: see the report")
            self._bad_noted += 1
        self.progress.update(
            jobs=self.run.records,
            offset=chunk.end_offset,
            errors=self.total.errors,
            changed=self.total.drift(CHANGED),
        )

    def warn(self, message: str) -> None:
        self.progress.note(message)


def _open_input(path: str) -> tuple[BinaryIO, int | None]:
    """The input stream, and its size when it is a regular file (else None)."""
    if path == "-":
        return sys.stdin.buffer, None
    try:
        stream = open(path, "rb")  # noqa: SIM115 -- closed by run()
    except FileNotFoundError:
        raise RerenderError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise RerenderError(f"{path}: is a directory, expected a JSON-lines file") from None
    except OSError as exc:
        raise RerenderError(f"{path}: cannot read: {exc.strerror}") from None
    status = os.fstat(stream.fileno())
    return stream, status.st_size if stat.S_ISREG(status.st_mode) else None


def _open_output(path: Path, input_path: str) -> OutputFile:
    if input_path != "-" and path.exists() and path.samefile(input_path):
        raise RerenderError(f"{path}: the output would overwrite the input")
    try:
        return OutputFile(path)
    except OSError as exc:
        raise RerenderError(f"{path}: cannot write: {exc.strerror}") from None


def run(
    options: Options,
    engine: Engine,
    *,
    renderer_template_versions: dict[str, str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    out = out if out is not None else sys.stdout
    err = err if err is not None else sys.stderr
    started = time.monotonic()
    output = Path(options.output)
    if options.html:
        _check_page_target(options)
    with ExitStack() as cleanup:
        input_stream, input_bytes = _open_input(options.input)
        cleanup.callback(input_stream.close)
        try:
            point = resume_point(output) if options.resume else ResumePoint()
        except OutputError as exc:
            raise RerenderError(str(exc)) from None
        out_file = _open_output(output, options.input)
        cleanup.callback(out_file.close)
        if options.html and not out_file.regular:
            raise RerenderError(f"--html needs OUTPUT as a regular file, not {output}")
        reader = LineReader(input_stream, options.block_bytes)
        if point.lines:
            skipped = reader.skip(point.lines)
            if skipped < point.lines:
                raise RerenderError(
                    f"{output} answers {point.lines:,} input lines but "
                    f"{options.input} has only {skipped:,}: is it the same input?"
                )
        # A regular file may be read by other processes at offsets (local pool).
        source = Input(
            reader,
            path=options.input if input_bytes is not None else None,
            size=input_bytes,
            block_bytes=options.block_bytes,
        )
        diff_dir = Path(options.diff_dir) if options.diff_dir else Path(f"{output}.diffs")
        diffs = DiffWriter(diff_dir, options.diff_limit, resume=options.resume)
        progress = make_progress(
            options.progress,
            total_bytes=input_bytes,
            start_offset=reader.offset,
            interval=options.log_interval,
            stream=err,
        )
        cleanup.callback(progress.close)
        if point.truncated_bytes:
            progress.note(f"cut a torn last line ({point.truncated_bytes} bytes) off {output}")
        if point.lines:
            progress.note(f"resuming after input line {point.lines:,}")
        sink = OutputSink(
            out_file, resume_point=point, resume=options.resume, diffs=diffs, progress=progress
        )
        stop = threading.Event()
        failure = _run_engine(engine, source, sink, stop)
        if failure is None:
            sink.begin()  # an empty input still yields an (empty) fresh output

    interrupted = stop.is_set()
    if failure is not None and not sink.run.records and not point.lines:
        err.write(f"rerender: error: {failure}\n")
        return EXIT_USAGE
    report = build_report(
        tally=sink.total,
        run_tally=sink.run,
        input_path=options.input,
        output_path=str(output),
        engine=engine.describe(),
        interrupted=interrupted or failure is not None,
        resumed_after_line=point.lines,
        elapsed_s=time.monotonic() - started,
        renderer_template_versions=renderer_template_versions,
        diff_dir=str(diff_dir),
        diffs_written=diffs.written,
        diff_limit=options.diff_limit,
        archive=options.archive,
    )
    print_summary(report, out)
    if options.report:
        try:
            Path(options.report).write_bytes(
                orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n"
            )
        except OSError as exc:
            err.write(f"rerender: error: {options.report}: cannot write: {exc.strerror}\n")
            return EXIT_USAGE
    if options.html and not _write_page(options, output, out, err):
        return EXIT_USAGE
    if failure is not None:
        err.write(
            f"rerender: error: {failure}; the output so far is complete and in order: "
            "re-run with --resume to continue\n"
        )
        return EXIT_USAGE
    if interrupted:
        err.write("rerender: interrupted; re-run with --resume to continue\n")
        return EXIT_INTERRUPTED
    if sink.total.errors:
        return EXIT_JOB_ERRORS
    if options.fail_on_drift and (sink.total.drift(CHANGED) or sink.total.drift(ERROR)):
        return EXIT_JOB_ERRORS
    return EXIT_OK


def _check_page_target(options: Options) -> None:
    """Refuse an --html that cannot work before the run, not after it."""
    assert options.html is not None
    if options.input == "-":
        # The page is made from the files after the run; standard input is gone by then.
        raise RerenderError("--html needs INPUT as a file, not standard input")
    target = Path(options.html)
    for other in (options.input, options.output):
        if target.exists() and Path(other).exists() and target.samefile(other):
            raise RerenderError(f"{target}: the drift page would overwrite {other}")
    directory = target.parent
    if not directory.is_dir() or not os.access(directory, os.W_OK):
        raise RerenderError(f"{target}: cannot write: no such directory, or not writable")


def _write_page(options: Options, output: Path, out: TextIO, err: TextIO) -> bool:
    """The drift page of the output as it now stands (whole, or interrupted)."""
    assert options.html is not None
    try:
        page = write_page(options.input, output, options.html)
    except PageError as exc:
        err.write(f"rerender: error: drift page: {exc}\n")
        return False
    out.write(f"  drift page: {page.path} ({page.size_bytes:,} bytes)\n")
    out.flush()
    return True


def _run_engine(
    engine: Engine, source: Input, sink: OutputSink, stop: threading.Event
) -> str | None:
    """Run the engine with Ctrl-C turned into a graceful stop; the failure, if any."""

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            raise KeyboardInterrupt  # second Ctrl-C: stop now (--resume copes)
        stop.set()

    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, on_sigint) if in_main_thread else None
    try:
        engine.run(source, sink, stop)
    except EngineError as exc:
        return str(exc)
    finally:
        if in_main_thread:
            signal.signal(signal.SIGINT, previous)
    return None
