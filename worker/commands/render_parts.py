"""`prompt-worker render` on more than one core: a regular JSON Lines file is cut into
contiguous parts at line ends, one per process.

The processes are forked once the renderer is built, so they share its prepared state
(templates, masking database) and start at once. This process renders the first part
straight to stdout while each child renders its part into a temporary spool file; the
spools are then appended in order, so the output is exactly the single-process output,
in input order. A part's process reports through its exit status: 0 every job
rendered, 1 some job got an error reply; anything else (a crash, a signal) is an
error of the run, reported as such after the parts before it were written.

Opt-in (`--workers N`): on an idle machine N processes approach N times one's rate,
but forking, spooling and copying cost CPU of their own, and on a machine whose cores
are busy anyway it was measured slower (docs/PERFORMANCE.md, "Commands and `render`").
"""

import itertools
import os
import shutil
import signal
import tempfile
from collections.abc import Callable
from typing import IO

# Renders the jobs in bytes [start, end) of the input to `out`; nonzero when any failed.
RenderRange = Callable[[int, int, IO[bytes]], int]


class PartFailed(Exception):
    """A part's process ended without rendering its part."""


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


def render_in_parts(cuts: list[int], render_range: RenderRange, out: IO[bytes]) -> int:
    """Render each range of `cuts` in its own process (the first here), writing the
    replies to `out` in order; nonzero when any job failed. Nothing may be pending in
    `out` (a child would write it again)."""
    children: list[tuple[int, IO[bytes]]] = []
    running: set[int] = set()
    try:
        for start, end in itertools.pairwise(cuts[1:]):
            spool: IO[bytes] = tempfile.TemporaryFile(prefix="prompt-worker-render-")  # noqa: SIM115 - closed below
            pid = os.fork()
            if pid == 0:  # the child: render its part, report by exit status only
                status = 2
                try:
                    status = 1 if render_range(start, end, spool) else 0
                    spool.flush()
                finally:
                    os._exit(status)
            children.append((pid, spool))
            running.add(pid)
        failed = render_range(cuts[0], cuts[1], out)
        out.flush()
        for number, (pid, spool) in enumerate(children, start=2):
            _, wait_status = os.waitpid(pid, 0)
            running.discard(pid)
            status = os.waitstatus_to_exitcode(wait_status)
            if status not in (0, 1):
                raise PartFailed(f"part {number} of {len(cuts) - 1} failed (status {status})")
            spool.seek(0)
            shutil.copyfileobj(spool, out, 1 << 20)
            out.flush()
            failed += status
        return failed
    finally:
        for pid, spool in children:
            spool.close()
            if pid in running:  # only after a failure: the run is over
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
