"""The embedded, broker-free way to run the builder.

Input is one JSON job (possibly pretty-printed), several one after another, or JSON
Lines, one job a line; output is one reply a line, in input order. A bad line gets an
error reply naming its input line, and rendering goes on; a blank line of JSON Lines
gets an empty line, so output line N answers input line N. Replies are written in
batches, and whatever is pending is flushed whenever the input has nothing more to read
yet, so `render` also works as a co-process over pipes (write a job, read its reply,
write the next). Exit 0 when every job rendered, 1 when any produced an error reply,
2 for usage or configuration problems and for an input without any job.
"""

import argparse
import functools
import gc
import io
import itertools
import mmap
import os
import select
import stat
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import IO, TYPE_CHECKING, Any

from worker.commands.budget_args import BudgetArgumentError, add_budget_arguments, default_budget
from worker.commands.common import (
    add_config_argument,
    complain,
    int_at_least,
    load_config_or_exit,
    os_problem,
)
from worker.commands.cores import usable_cores

if TYPE_CHECKING:
    from worker.render.replies import RenderOutcome

    Render = Callable[[bytes], RenderOutcome]

# A job of the input: the line and column it starts at (1-based, as editors count) and
# its body; a blank line of JSON Lines is an item with no body.
Item = tuple[int, int, bytes | None]

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
    blocks: its pieces once more, joined once); a last line without a newline comes
    last, and nothing after a final newline (it ends the last line, it starts none)."""
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
    if partial:
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
                if start < size:
                    yield data[start:]
                return
            yield data[start:end]
            start = end + 1


def _blank(line: bytes) -> bool:
    return not line or line.isspace()


def _stripped(line: bytes) -> bytes:
    """`line.strip()` without a copy in the common case: nothing to strip."""
    if line[0] in _SPACE or line[-1] in _SPACE:
        return line.strip()
    return line


def _json_lines(lines: Iterable[bytes], first_line: int) -> Iterator[Item]:
    """JSON Lines from input line `first_line` on: each line a job, a blank one None."""
    for number, line in enumerate(lines, first_line):
        if _blank(line):
            yield number, 1, None
        else:
            body = _stripped(line)
            yield number, 1 + len(line) - len(line.lstrip()) if body is not line else 1, body


def _is_json(line: bytes) -> bool:
    import orjson

    try:
        orjson.loads(line)
    except orjson.JSONDecodeError:
        return False
    return True


def iter_jobs(stream: IO[bytes], before_wait: Callable[[], None] = _nothing) -> Iterator[Item]:
    """The jobs of `stream`, each as (input line, column, body) where it starts: JSON
    Lines streamed, one (multi-line) JSON document, or several concatenated.

    The first non-blank line decides: if it is JSON on its own the input is JSON Lines
    and is streamed, line N of the input answered by line N of the output (a blank line
    is an item with no body: an empty output line keeps the two aligned). Otherwise the
    whole input is read: one JSON document, or documents one after the other (pretty-
    printed jobs concatenated, as `jq` writes them), each an item at the line it starts
    on; if it is neither, it is taken line by line again so each bad line gets its own
    reply. `before_wait` runs whenever the next read would wait for the writer.
    """
    lines = _mapped_lines(stream) or _lines(_blocks(stream, before_wait))
    blanks = 0
    first = b""
    for line in lines:
        if not _blank(line):
            first = line
            break
        blanks += 1
    if not first:
        return
    if _is_json(first):
        for number in range(1, blanks + 1):
            yield number, 1, None
        yield from _json_lines([first], blanks + 1)
        yield from _json_lines(lines, blanks + 2)
        return
    document = b"\n".join([first, *lines])
    if _is_json(document):
        yield blanks + 1, 1, document
        return
    documents = _documents(document, blanks + 1)
    if documents is not None:
        yield from documents
        return
    for number in range(1, blanks + 1):
        yield number, 1, None
    yield from _json_lines(document.split(b"\n"), blanks + 1)


def _documents(text: bytes, first_line: int) -> list[Item] | None:
    """The JSON documents written one after another in `text` (which starts at input
    line `first_line`), each at its line and column; None unless there are two or more,
    and the first spans lines (pretty-printed jobs, not JSON Lines with a bad line).
    A document that is not JSON ends the list: it and whatever follows are one item,
    whose error reply says where it goes wrong."""
    import json

    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError:
        return None
    decoder = json.JSONDecoder()
    items: list[Item] = []
    position, line, line_start = 0, first_line, 0
    size = len(decoded)
    while True:
        while position < size and decoded[position] in " \t\r\n":
            if decoded[position] == "\n":
                line, line_start = line + 1, position + 1
            position += 1
        if position == size:
            break
        column = position - line_start + 1
        try:
            _, end = decoder.raw_decode(decoded, position)
        except ValueError:
            if not items:
                return None
            items.append((line, column, decoded[position:].encode("utf-8")))
            break
        piece = decoded[position:end]
        if not items and "\n" not in piece:
            return None
        items.append((line, column, piece.encode("utf-8")))
        newlines = piece.count("\n")
        if newlines:
            line, line_start = line + newlines, position + piece.rindex("\n") + 1
        position = end
    return items if len(items) > 1 else None


def _output() -> IO[bytes]:
    """Stdout with a buffer that holds several replies: a reply is copied into it, not
    allocated as a new batch, and written out when it fills or is flushed."""
    sys.stdout.flush()
    descriptor = _descriptor(sys.stdout)
    if descriptor is None:  # replaced by a test, say
        return sys.stdout.buffer
    return io.BufferedWriter(io.FileIO(descriptor, "w", closefd=False), buffer_size=_OUT_BUFFER)


def _render_jobs(
    items: Iterable[Item], render: "Render", out: IO[bytes], line_offset: Callable[[], int]
) -> int:
    """Render `items` to `out`, a reply a line (a blank input line: an empty line); how
    many got an error reply. An error reply says the input line its job starts on:
    `line_offset()` more than the item's own (the lines before a part of the input)."""
    write = out.write
    failed = 0
    for line, column, body in items:
        if body is None:
            write(b"\n")
            continue
        outcome = render(body)
        if outcome.ok:
            write(outcome.body)
        else:
            failed += 1
            write(at_input_line(outcome.body, line + line_offset(), column))
        write(b"\n")
    return failed


def _no_offset() -> int:
    return 0


def at_input_line(reply: bytes, line: int, column: int = 1) -> bytes:
    """An error reply of `render`, saying where its job is in the input: `error.line`,
    the input line the job starts on, and a JSON syntax error's position counted in
    the input's lines and columns rather than the job's own (its line 1 is input line
    `line`, starting at `column`)."""
    import orjson

    from worker.render.json_words import shift_position

    data = orjson.loads(reply)
    error = data["error"]
    error["message"] = shift_position(error["message"], line, column)
    error["line"] = line
    return orjson.dumps(data)


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
    first = next((line for line in _map_lines(descriptor, size, start) if not _blank(line)), None)
    if first is None or not _is_json(first):
        return None
    with mmap.mmap(descriptor, size, access=mmap.ACCESS_READ) as data:
        return boundaries(data.find, start, size, chunks)


def _newlines_before(descriptor: int, offset: int) -> int:
    """How many lines of the file end before `offset` (an error reply's line number in
    a part of the input: counted only when a job there fails)."""
    count = position = 0
    while position < offset:
        block = os.pread(descriptor, min(_BLOCK * 16, offset - position), position)
        if not block:
            break
        count += block.count(b"\n")
        position += len(block)
    return count


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
            complain("render", str(exc))
            return 2
        config = load_config_or_exit(args.config, "render")
        renderer = Renderer(config, default_budget=budget)
    finally:
        gc.freeze()
        gc.enable()
    try:
        stream: IO[bytes] = sys.stdin.buffer if args.input == "-" else open(args.input, "rb")  # noqa: SIM115
    except OSError as exc:
        complain("render", f"cannot open {args.input}: {os_problem(exc)}")
        return 2
    out = _output()
    render = renderer.render
    with stream:
        try:
            workers = args.workers or usable_cores()
            cuts = _cuts(stream, out, workers)
            if cuts is None:
                items = iter_jobs(stream, out.flush)
                first = next(items, None)
                if first is None:
                    source = "stdin" if args.input == "-" else args.input
                    complain("render", f"no job to render: {source} is empty")
                    return 2
                failed = _render_jobs(itertools.chain((first,), items), render, out, _no_offset)
            else:
                from worker.commands.render_parts import PartFailed, render_in_turns

                descriptor = stream.fileno()

                def render_range(start: int, end: int, target: IO[bytes]) -> int:
                    lines_before = functools.cache(lambda: _newlines_before(descriptor, start))
                    items = _json_lines(_map_lines(descriptor, end, start), 1)
                    return _render_jobs(items, render, target, lines_before)

                try:
                    failed = render_in_turns(cuts, workers, render_range, out)
                except PartFailed as exc:
                    complain("render", str(exc))
                    return 2
        finally:
            out.flush()
    return 1 if failed else 0
