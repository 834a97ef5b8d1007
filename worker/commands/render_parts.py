"""`prompt-worker render` on more than one core: a regular JSON Lines file is cut at
line ends into chunks of about `CHUNK_BYTES`, dealt out in turn to N processes.

The processes are forked once the renderer is built, so they share its prepared state
(templates, masking database) and start at once. Process k renders chunks k, k + N,
k + 2N, ... each into memory, and writes a chunk to the output only when the chunk
before it has been written: a token (one byte through a pipe) goes round the ring of
processes in chunk order. So the output is exactly the single-process output, in input
order; it is written by whichever process rendered it, straight to the shared
descriptor, with no spool file and nothing copied back; and memory holds at most one
chunk's replies per process.

A process reports through its exit status: 0 every job rendered, 1 some job got an
error reply, `_CRASHED` it raised or was killed, `_ABORTED` the ring broke before its
turn, `_READER_GONE` the output's reader closed it. A run whose ring breaks fails
with `PartFailed` naming the first chunk not written; every chunk before it is in the
output. A closed output is `BrokenPipeError`, as it is for one process.
"""

import io
import itertools
import mmap
import os
import signal
from collections.abc import Callable
from typing import IO

# Renders the jobs in bytes [start, end) of the input to `out`; nonzero when any failed.
RenderRange = Callable[[int, int, IO[bytes]], int]

# Input bytes per chunk: small enough that the replies of one held in memory per
# process stay a few megabytes, large enough that passing the turn is rare (a typical
# ReAct job is 21 KB, so about 200 jobs a chunk).
CHUNK_BYTES = 4 << 20

_CRASHED = 2
_ABORTED = 3
_READER_GONE = 4


class PartFailed(Exception):
    """A process ended without rendering its chunks."""


class _RingBroken(Exception):
    """The process before this one in the ring ended without passing the turn."""


def boundaries(find: Callable[[bytes, int], int], start: int, end: int, parts: int) -> list[int]:
    """Offsets cutting [start, end) into up to `parts` ranges, each ending after a b"\\n"."""
    cuts = [start]
    for k in range(1, parts):
        guess = max(start + (end - start) * k // parts, cuts[-1])
        newline = find(b"\n", guess)
        if newline < 0 or newline + 1 >= end:
            break
        if newline + 1 > cuts[-1]:
            cuts.append(newline + 1)
    cuts.append(end)
    return cuts


def chunk_count(size: int, workers: int) -> int:
    """How many chunks to cut `size` input bytes into for `workers` processes: one when
    a second process would not get a whole chunk (forking would not pay)."""
    if workers < 2:
        return 1
    chunks = -(-size // CHUNK_BYTES)
    return 1 if chunks < 2 else max(chunks, workers)


class _Turns:
    """One process's place in the ring: its chunks, where it waits for its turn and
    where it passes the turn on."""

    def __init__(
        self,
        chunks: list[tuple[int, int]],
        index: int,
        workers: int,
        wait_fd: int,
        pass_fd: int,
        written: mmap.mmap,
    ) -> None:
        self.mine = range(index, len(chunks), workers)
        self.chunks = chunks
        self.wait_fd = wait_fd
        self.pass_fd = pass_fd
        self.written = written  # shared: how many chunks are in the output

    def take(self, render_range: RenderRange, out: IO[bytes]) -> int:
        """Render and write this process's chunks in turn; nonzero when any job got an
        error reply."""
        failed = 0
        last = len(self.chunks) - 1
        for number in self.mine:
            start, end = self.chunks[number]
            if number == 0:  # the first chunk holds the turn from the start: stream it
                failed += render_range(start, end, out)
            else:
                held = io.BytesIO()
                failed += render_range(start, end, held)
                if not os.read(self.wait_fd, 1):
                    raise _RingBroken
                out.write(held.getbuffer())
            out.flush()
            self.written[:8] = (number + 1).to_bytes(8, "little")
            if number < last:
                try:
                    os.write(self.pass_fd, b".")
                except BrokenPipeError:  # the token's pipe, not the output: next one died
                    raise _RingBroken from None
        return failed


def render_in_turns(
    cuts: list[int], workers: int, render_range: RenderRange, out: IO[bytes]
) -> int:
    """Render the chunks between `cuts` in `workers` processes (this one and forked
    children) taking turns to write to `out`, a buffered file with a descriptor;
    nonzero when any job failed. Nothing may be pending in `out` (a child would write
    it again)."""
    chunks = list(itertools.pairwise(cuts))
    workers = max(1, min(workers, len(chunks)))
    if workers == 1:
        return render_range(cuts[0], cuts[-1], out)
    pipes = [os.pipe() for _ in range(workers)]
    written = mmap.mmap(-1, 8)
    children: dict[int, int] = {}  # pid -> index in the ring
    turns: _Turns | None = None
    ring_broken = False
    try:
        for index in range(1, workers):
            pid = os.fork()
            if pid == 0:  # a child: take its turns, report by exit status only
                status = _CRASHED
                try:
                    mine = _ring_place(pipes, index, chunks, workers, written)
                    status = 1 if mine.take(render_range, out) else 0
                except _RingBroken:
                    status = _ABORTED
                except BrokenPipeError:
                    status = _READER_GONE
                finally:
                    os._exit(status)
            children[pid] = index
        turns = _ring_place(pipes, 0, chunks, workers, written)
        try:
            failed = turns.take(render_range, out)
        except _RingBroken:
            failed, ring_broken = 0, True
        statuses = {}
        for pid, index in list(children.items()):
            _, wait_status = os.waitpid(pid, 0)
            del children[pid]
            statuses[index] = os.waitstatus_to_exitcode(wait_status)
        if _READER_GONE in statuses.values():
            raise BrokenPipeError("the output was closed")
        done = int.from_bytes(written[:8], "little")
        if ring_broken or any(status not in (0, 1) for status in statuses.values()):
            culprit = statuses.get(done % workers, "unknown")
            raise PartFailed(f"part {done + 1} of {len(chunks)} failed (status {culprit})")
        return failed + sum(statuses.values())
    finally:
        for pid in children:  # only after a failure here: the run is over
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        written.close()
        still_open = (
            [turns.wait_fd, turns.pass_fd] if turns else [fd for pair in pipes for fd in pair]
        )
        for fd in still_open:
            os.close(fd)


def _ring_place(
    pipes: list[tuple[int, int]],
    index: int,
    chunks: list[tuple[int, int]],
    workers: int,
    written: mmap.mmap,
) -> _Turns:
    """Close every pipe end but the two process `index` uses, so that a process that
    dies closes the only writer its successor waits on (the successor reads EOF)."""
    wait_fd = pipes[index][0]
    pass_fd = pipes[(index + 1) % workers][1]
    for read_fd, write_fd in pipes:
        for fd in (read_fd, write_fd):
            if fd not in (wait_fd, pass_fd):
                os.close(fd)
    return _Turns(chunks, index, workers, wait_fd, pass_fd, written)
