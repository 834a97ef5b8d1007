"""The input of `prompt-worker render`: JSON Lines, one JSON document, or several
written one after another, cut into jobs that know the input line they start on.

Regular files are read through a memory map, pipes a block at a time (a co-process's
writer is never waited for while replies are pending: `before_wait`). Nothing here
parses a job beyond telling whether a line or a document is JSON.
"""

import mmap
import os
import select
import stat
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

# A job of the input: the line and column it starts at (1-based, as editors count) and
# its body; a blank line of JSON Lines is an item with no body.
Item = tuple[int, int, bytes | None]

# Input is read in blocks of up to this size.
_BLOCK = 1 << 16
# bytes.strip()'s whitespace, as the values indexing a bytes object gives.
_SPACE = frozenset(b" \t\n\r\x0b\x0c")


def nothing() -> None:
    pass


def _blocks(stream: IO[bytes], before_wait: Callable[[], None]) -> Iterator[bytes]:
    """The bytes of `stream` as they come; `before_wait` runs before each read that
    would have to wait for the writer (never for a regular file: it is always ready)."""
    # read1: what is there, up to a block, waiting only when there is nothing.
    read = getattr(stream, "read1", stream.read)
    poller: select.poll | None = None
    descriptor = descriptor_of(stream)
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


def regular_file(stream: IO[bytes]) -> tuple[int, int, int] | None:
    """(descriptor, size, position) of a regular file with bytes left to read; None for
    anything else (a pipe, a terminal, a stream without a descriptor, an exhausted file)."""
    descriptor = descriptor_of(stream)
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
    regular = regular_file(stream)
    return None if regular is None else map_lines(*regular)


def map_lines(descriptor: int, size: int, start: int) -> Iterator[bytes]:
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


def blank(line: bytes) -> bool:
    return not line or line.isspace()


def _stripped(line: bytes) -> bytes:
    """`line.strip()` without a copy in the common case: nothing to strip."""
    if line[0] in _SPACE or line[-1] in _SPACE:
        return line.strip()
    return line


def json_lines(lines: Iterable[bytes], first_line: int) -> Iterator[Item]:
    """JSON Lines from input line `first_line` on: each line a job, a blank one None."""
    for number, line in enumerate(lines, first_line):
        if blank(line):
            yield number, 1, None
        else:
            body = _stripped(line)
            column = 1 if body is line else 1 + len(line) - len(line.lstrip())
            yield number, column, body


def is_json(line: bytes) -> bool:
    import orjson

    try:
        orjson.loads(line)
    except orjson.JSONDecodeError:
        return False
    return True


def iter_jobs(stream: IO[bytes], before_wait: Callable[[], None] = nothing) -> Iterator[Item]:
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
        if not blank(line):
            first = line
            break
        blanks += 1
    if not first:
        return
    if is_json(first):
        for number in range(1, blanks + 1):
            yield number, 1, None
        yield from json_lines([first], blanks + 1)
        yield from json_lines(lines, blanks + 2)
        return
    document = b"\n".join([first, *lines])
    if is_json(document):
        yield blanks + 1, 1, document
        return
    documents = _documents(document, blanks + 1)
    if documents is not None:
        yield from documents
        return
    for number in range(1, blanks + 1):
        yield number, 1, None
    yield from json_lines(document.split(b"\n"), blanks + 1)


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


def newlines_before(descriptor: int, offset: int) -> int:
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


def descriptor_of(stream: IO[Any]) -> int | None:
    """The file descriptor under `stream`, or None when it has none (BytesIO, a stream
    a test put in place of stdout)."""
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None
