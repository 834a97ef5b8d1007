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
import sys
from collections.abc import Callable, Iterable
from typing import IO, TYPE_CHECKING

from worker.commands.budget_args import BudgetArgumentError, add_budget_arguments, default_budget
from worker.commands.common import (
    add_config_argument,
    complain,
    int_at_least,
    load_config_or_exit,
    os_problem,
)
from worker.commands.cores import usable_cores
from worker.commands.render_input import (
    Item,
    blank,
    descriptor_of,
    is_json,
    iter_jobs,
    json_lines,
    map_lines,
    newlines_before,
    regular_file,
)

if TYPE_CHECKING:
    from worker.render.replies import RenderOutcome

    Render = Callable[[bytes], RenderOutcome]

HELP = "render jobs from a file or stdin to replies on stdout (no broker)"

# Replies are written once this much is pending (or the input would wait).
_OUT_BUFFER = 1 << 18


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


def _output() -> IO[bytes]:
    """Stdout with a buffer that holds several replies: a reply is copied into it, not
    allocated as a new batch, and written out when it fills or is flushed."""
    sys.stdout.flush()
    descriptor = descriptor_of(sys.stdout)
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
    if workers < 2 or descriptor_of(out) is None:
        return None
    from worker.commands.render_parts import boundaries, chunk_count

    regular = regular_file(stream)
    if regular is None:
        return None
    descriptor, size, start = regular
    chunks = chunk_count(size - start, workers)
    if chunks < 2:
        return None
    first = next((line for line in map_lines(descriptor, size, start) if not blank(line)), None)
    if first is None or not is_json(first):
        return None
    with mmap.mmap(descriptor, size, access=mmap.ACCESS_READ) as data:
        return boundaries(data.find, start, size, chunks)


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
                    lines_before = functools.cache(lambda: newlines_before(descriptor, start))
                    items = json_lines(map_lines(descriptor, end, start), 1)
                    return _render_jobs(items, render, target, lines_before)

                try:
                    failed = render_in_turns(cuts, workers, render_range, out)
                except PartFailed as exc:
                    complain("render", str(exc))
                    return 2
        finally:
            out.flush()
    return 1 if failed else 0
