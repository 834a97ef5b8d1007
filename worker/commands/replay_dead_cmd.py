"""Move dead-lettered jobs back to the request queue.

Each job is published to the request queue with publisher confirms, then removed from
the dead-letter queue; a failure leaves it where it was. Only the jobs present at the
start are handled, so a job that dies again is not replayed twice in one run.

Use --dry-run first: it lists job id, kind, size and why each job died (RabbitMQ's
x-death header), never the payload, and leaves the queue as it was. The broker and
queue names come from the same flags and PROMPT_WORKER_* variables as `serve`.
Exit 0 when done, 1 when a job could not be replayed (the run stops there), 2 for a
configuration or connection problem.
"""

import argparse
import os
import sys
from typing import TYPE_CHECKING

from worker.commands.common import int_at_least

if TYPE_CHECKING:
    from worker.transport.producers.replay import Action, DeadLetter

HELP = "move dead-lettered jobs back to the request queue (--dry-run lists them)"
# The serve settings this command needs, with the same flags and variables.
_SETTINGS = (
    "amqp_url",
    "request_queue",
    "dead_letter_queue",
    "tls_ca_file",
    "tls_cert_file",
    "tls_key_file",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from worker.transport import setting_flags

    parser.add_argument(
        "--dry-run", action="store_true", help="list the dead letters; move nothing"
    )
    parser.add_argument(
        "--limit", type=int_at_least(1), metavar="N", help="handle at most N jobs (after filtering)"
    )
    parser.add_argument(
        "--filter-kind", metavar="KIND", help="only jobs of this kind; others stay where they are"
    )
    parser.add_argument(
        "--json", action="store_true", help="one JSON object a line instead of a table"
    )
    setting_flags.add_arguments(parser, _SETTINGS)


COLUMNS = ("ACTION", "JOB_ID", "KIND", "BYTES", "REASON", "FROM_QUEUE", "DEATHS", "REPLAYS")


def _row(action: "Action", letter: "DeadLetter") -> str:
    cells = (
        action,
        letter.job_id or "-",
        letter.kind or "-",
        str(letter.size),
        letter.reason or "-",
        letter.queue or "-",
        str(letter.deaths),
        str(letter.replays),
    )
    return "\t".join(cells)


def run(args: argparse.Namespace) -> int:
    import asyncio

    import orjson
    from aiormq.exceptions import AMQPError

    from worker.ops.logs import silence_broker_libraries
    from worker.transport import settings
    from worker.transport.link.addresses import first_address
    from worker.transport.link.broker_failures import (
        ConnectFailed,
        broker_address,
        connect_failure,
        where_credentials_are,
    )
    from worker.transport.producers.replay import Action, DeadLetter, ReplayError, replay_dead

    try:
        config = settings.from_args(args, os.environ)
    except settings.SettingsError as exc:
        print(f"prompt-worker replay-dead: {exc}", file=sys.stderr)
        return 2

    header = [] if args.json else ["\t".join(COLUMNS)]

    def show(action: Action, letter: DeadLetter) -> None:
        if args.json:
            line = orjson.dumps({"action": action, **letter.as_dict()}).decode()
        else:
            line = _row(action, letter)
        # The header comes with the first row: a run that cannot connect, or finds
        # nothing, prints its one line on stderr and no table.
        while header:
            print(header.pop(), flush=True)
        print(line, flush=True)

    from worker.errors import ConfigError
    from worker.ops.tracing import start_tracing

    try:
        # Each replay is a span of its job's trace when OTEL_* turns tracing on.
        tracing = start_tracing(os.environ)
    except ConfigError as exc:
        print(f"prompt-worker replay-dead: tracing: {exc}", file=sys.stderr)
        return 2
    silence_broker_libraries()
    try:
        result = asyncio.run(
            replay_dead(
                config.amqp_url,
                config.dead_letter_queue,
                config.request_queue,
                dry_run=args.dry_run,
                limit=args.limit,
                kind=args.filter_kind,
                on_letter=show,
                tls=config.tls,
                tracing=tracing,
            )
        )
    except ReplayError as exc:
        print(f"prompt-worker replay-dead: {exc}", file=sys.stderr)
        return 2
    except (OSError, AMQPError, TimeoutError, ConnectFailed) as exc:
        # After several addresses the message names them all (ConnectFailed).
        where = broker_address(first_address(config.amqp_url))
        fix_in = where_credentials_are(config.source_of("amqp_url"))
        message = connect_failure(where, exc, fix_in=fix_in)
        print(f"prompt-worker replay-dead: {message}", file=sys.stderr)
        return 2
    finally:
        if tracing is not None:
            tracing.shutdown()  # exports the replays' spans

    what = "listed (dry run)" if args.dry_run else "replayed"
    count = result.matched if args.dry_run else result.replayed
    summary = f"{count} {what} from {config.dead_letter_queue!r}"
    if result.skipped:
        summary += f", {result.skipped} of other kinds left in place"
    print(f"prompt-worker replay-dead: {summary}", file=sys.stderr)
    if result.error is not None:
        print(f"prompt-worker replay-dead: stopped: {result.error}", file=sys.stderr)
        return 1
    return 0
