"""The embedded, broker-free way to run the builder.

Input is one JSON job (possibly pretty-printed) or JSON Lines, one job a line; output
is one reply a line, in input order. A bad line gets an error reply and rendering goes
on. Replies are written in batches, and whatever is pending is flushed whenever the
input has nothing more to read yet, so `render` also works as a co-process over pipes
(write a job, read its reply, write the next). Exit 0 when every job rendered, 1 when
any produced an error reply, 2 for usage.
"""

import argparse
import gc
import io
import mmap
import os
import select
import stat
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import IO, TYPE_CHECKING, Any

from worker.commands.budget_args import BudgetArgumentError, add_budget_arguments, default_budget
from worker.commands.common import add_config_argument, int_at_least, load_config_or_exit
from worker.commands.cores import usable_cores

if TYPE_CHECKING:
    from worker.render.replies import RenderOutcome

    Render = Callable[[bytes], RenderOutcome]

HELP = "render jobs from a file or stdin to replies on stdout (no broker)"

# Input is read in blocks of up to this size.
_BLOCK = 1 << 16
# Replies are written once this much is pending (or the input would wait).
_OUT_BUFFER = 1 << 18
# bytes.strip()'s whitespace, as the values indexing a bytes object gives.
_SPACE = frozenset(b" \t\n\r\x0b\x0c")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "input",
        nargs="?",
        default="-",
        metavar="FILE|-",
        help="job file (JSON or JSON Lines); - for stdin",
    )
    add_config_argument(parser)
    parser.add_argument(
        "--workers",
        type=int_at_least(1),
        default=None,
        metavar="N",
        help="processes rendering a JSON Lines file, output still in input order (default: "
        "the usable cores; files under 8 MiB, pipes and single documents use one)",
    )
    add_budget_arguments(parser, "how the jobs would fit a model with a smaller context window")


def _nothing() -> None:
    pass


def _blocks(stream: IO[bytes], before_wait: Callable[[], None]) -> Iterator[bytes]:
    """The bytes of `stream` as they come; `before_wait` runs before each read that
    would have to wait for the writer (never for a regular file: it is always ready)."""
    # read1: what is there, up to a block, waiting only when there is nothing.
    read = getattr(stream, "read1", stream.read)
    poller: select.poll | None = None
    descriptor = _descriptor(stream)
    if descriptor is not None:  # none (e.g. BytesIO): never waits
        poller = select.poll()
        poller.register(descriptor, select.POLLIN)
    while True:
        if poller is not None and not poller.poll(0):
            before_wait()
        block = read(_BLOCK)
        if not block:
            return
        yield block


def _lines(blocks: Iterator[bytes]) -> Iterator[bytes]:
    """Lines of the blocks without their b"\\n", each copied once (a line spanning
    blocks: its pieces once more, joined once); the piece after the last newline comes
    last (b"" when the input ends with one)."""
    partial: list[bytes] = []  # pieces of a line that spans blocks
    for block in blocks:
        lines = block.split(b"\n")
        last = lines.pop()
        if lines:
            if partial:
                partial.append(lines[0])
                lines[0] = b"".join(partial)
                partial = []
            yield from lines
        if last:
            partial.append(last)
    yield b"".join(partial)


def _regular_file(stream: IO[bytes]) -> tuple[int, int, int] | None:
    """(descriptor, size, position) of a regular file with bytes left to read; None for
    anything else (a pipe, a terminal, a stream without a descriptor, an exhausted file)."""
    descriptor = _descriptor(stream)
    if descriptor is None:
        return None
    try:
        info = os.fstat(descriptor)
        start = stream.tell()
    except (AttributeError, OSError, ValueError):
        return None
    if not stat.S_ISREG(info.st_mode) or info.st_size <= start:
        return None
    return descriptor, info.st_size, start


def _mapped_lines(stream: IO[bytes]) -> Iterator[bytes] | None:
    """The lines of a regular file read through a memory map, as `_lines` gives them,
    or None for anything else: each line is then copied once, out of the page cache,
    instead of read into a block and copied again out of it."""
    regular = _regular_file(stream)
    return None if regular is None else _map_lines(*regular)


def _map_lines(descriptor: int, size: int, start: int) -> Iterator[bytes]:
    with mmap.mmap(descriptor, size, access=mmap.ACCESS_READ) as data:
        if hasattr(data, "madvise"):
            data.madvise(mmap.MADV_SEQUENTIAL)
        find = data.find
        while True:
            end = find(b"\n", start)
            if end < 0:
                yield data[start:]
                return
            yield data[start:end]
            start = end + 1


def _jobs(lines: Iterable[bytes]) -> Iterator[bytes]:
    """The job bodies among JSON Lines: blank lines skipped, whitespace stripped."""
    for line in lines:
        if line and not line.isspace():
            yield _stripped(line)


def _stripped(line: bytes) -> bytes:
    """`line.strip()` without a copy in the common case: nothing to strip."""
    if line[0] in _SPACE or line[-1] in _SPACE:
        return line.strip()
    return line


def _is_json(line: bytes) -> bool:
    import orjson

    try:
        orjson.loads(line)
    except orjson.JSONDecodeError:
        return False
    return True


def iter_jobs(stream: IO[bytes], before_wait: Callable[[], None] = _nothing) -> Iterator[bytes]:
    """Job bodies of `stream`: JSON Lines streamed, or one (multi-line) JSON document.

    The first non-blank line decides: if it is JSON on its own the input is JSON Lines
    and is streamed; otherwise the whole input is read as one document, and if that is
    not JSON either, it is split back into lines so each bad line gets its own reply.
    `before_wait` runs whenever the next read would wait for the writer.
    """
    lines = _mapped_lines(stream) or _lines(_blocks(stream, before_wait))
    first = b""
    for line in lines:
        if line and not line.isspace():
            first = line
            break
    if not first:
        return
    if _is_json(first):
        yield _stripped(first)
        yield from _jobs(lines)
        return
    document = b"\n".join([first, *lines])
    if _is_json(document):
        yield document
        return
    for line in document.splitlines():
        if line and not line.isspace():
            yield _stripped(line)


def _output() -> IO[bytes]:
    """Stdout with a buffer that holds several replies: a reply is copied into it, not
    allocated as a new batch, and written out when it fills or is flushed."""
    sys.stdout.flush()
    descriptor = _descriptor(sys.stdout)
    if descriptor is None:  # replaced by a test, say
        return sys.stdout.buffer
    return io.BufferedWriter(io.FileIO(descriptor, "w", closefd=False), buffer_size=_OUT_BUFFER)


def _render_jobs(bodies: Iterable[bytes], render: "Render", out: IO[bytes]) -> int:
    """Render `bodies` to `out`, a reply a line; how many got an error reply."""
    write = out.write
    failed = 0
    for body in bodies:
        outcome = render(body)
        if not outcome.ok:
            failed += 1
        write(outcome.body)
        write(b"\n")
    return failed


def _cuts(stream: IO[bytes], out: IO[bytes], workers: int) -> list[int] | None:
    """Where to cut the input into chunks for `workers` processes; None for one
    process: one was asked for, or the input is not a regular file of JSON Lines large
    enough to share out, or the output has no descriptor to share."""
    if workers < 2 or _descriptor(out) is None:
        return None
    from worker.commands.render_parts import boundaries, chunk_count

    regular = _regular_file(stream)
    if regular is None:
        return None
    descriptor, size, start = regular
    chunks = chunk_count(size - start, workers)
    if chunks < 2:
        return None
    first = next(_jobs(_map_lines(descriptor, size, start)), None)
    if first is None or not _is_json(first):
        return None
    with mmap.mmap(descriptor, size, access=mmap.ACCESS_READ) as data:
        return boundaries(data.find, start, size, chunks)


def _descriptor(stream: IO[Any]) -> int | None:
    """The file descriptor under `stream`, or None when it has none (BytesIO, a stream
    a test put in place of stdout)."""
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None


def run(args: argparse.Namespace) -> int:
    # Start-up allocates tens of thousands of long-lived objects (models, schemas,
    # detectors) and no garbage worth collecting: the collector would only scan them,
    # over and over. They are frozen (never scanned again) once the renderer is built.
    gc.disable()
    try:
        from worker.render.renderer import Renderer

        try:
            budget = default_budget(args, check_tokenizer=True)
        except BudgetArgumentError as exc:
            print(f"prompt-worker render: {exc}", file=sys.stderr)
            return 2
        config = load_config_or_exit(args.config, "render")
        renderer = Renderer(config, default_budget=budget)
    finally:
        gc.freeze()
        gc.enable()
    try:
        stream: IO[bytes] = sys.stdin.buffer if args.input == "-" else open(args.input, "rb")  # noqa: SIM115
    except OSError as exc:
        print(f"prompt-worker render: cannot open {args.input}: {exc.strerror}", file=sys.stderr)
        return 2
    out = _output()
    render = renderer.render
    with stream:
        try:
            workers = args.workers or usable_cores()
            cuts = _cuts(stream, out, workers)
            if cuts is None:
                failed = _render_jobs(iter_jobs(stream, out.flush), render, out)
            else:
                from worker.commands.render_parts import PartFailed, render_in_turns

                descriptor = stream.fileno()

                def render_range(start: int, end: int, target: IO[bytes]) -> int:
                    return _render_jobs(_jobs(_map_lines(descriptor, end, start)), render, target)

                try:
                    failed = render_in_turns(cuts, workers, render_range, out)
                except PartFailed as exc:
                    print(f"prompt-worker render: {exc}", file=sys.stderr)
                    return 2
        finally:
            out.flush()
    return 1 if failed else 0
