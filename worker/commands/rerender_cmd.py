"""What would the pipeline send now for past sessions?

Each input line is a job, or {"job": {...}, "messages": [...]} where "messages" (or
"expected_messages") is what was sent before. Output line N answers input line N: the
reply, without meta.render_ms, plus "drift": same | changed | error for lines with
prior messages. A bad line gets an error record ("bad_line": true) and a blank line an
empty line, so the two files stay aligned.

--from-archive AMQP_URL --since WHEN takes the records serve wrote to the archive
stream in that window as the input (spooled to OUTPUT.archive.jsonl first).
Engines: --local (default) renders here on all cores; --broker publishes to the
worker fleet. Ctrl-C leaves a valid partial output; --resume continues it.
Exit 0 when every job rendered (drift included, unless --fail-on-drift), 1 when any
job errored, 2 for usage, configuration, input or broker problems, 130 on Ctrl-C.
See docs/RERENDER.md.
"""

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

from worker.commands.archive_args import (
    ArchiveArgumentError,
    add_archive_arguments,
    archive_source,
    read_window,
)
from worker.commands.budget_args import (
    BudgetArgumentError,
    add_budget_arguments,
    default_budget,
)
from worker.commands.common import add_config_argument, int_at_least, load_config_or_exit
from worker.commands.cores import usable_cores
from worker.errors import ConfigError

# The serve settings the broker engine shares, with the same flags and variables.
_TLS_SETTINGS = ("tls_ca_file", "tls_cert_file", "tls_key_file")

if TYPE_CHECKING:
    from schemas.budget import Budget
    from worker.rerender.sink import Engine

HELP = "re-render past jobs (JSON Lines) and report drift from what was sent"
AMQP_URL_ENV = "PROMPT_WORKER_AMQP_URL"
REQUEST_QUEUE_ENV = "PROMPT_WORKER_REQUEST_QUEUE"
MAX_MESSAGE_BYTES_ENV = "PROMPT_WORKER_MAX_MESSAGE_BYTES"


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _amqp_url(text: str) -> str:
    if not text:
        return text  # a bare --broker (argparse passes its const through here too)
    from worker.transport.settings import parse_amqp_url

    try:
        return parse_amqp_url(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"{exc} (write --broker=URL, or put INPUT before --broker)"
        ) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from worker.rerender.progress import MODES
    from worker.rerender.run import DEFAULT_DIFF_LIMIT
    from worker.transport.setting_flags import add_arguments as add_setting_arguments

    parser.add_argument(
        "input",
        metavar="INPUT.jsonl",
        nargs="?",
        help="jobs, one a line; - for stdin (or --from-archive)",
    )
    parser.add_argument(
        "--out", required=True, metavar="OUTPUT.jsonl", help="one record per input line"
    )
    engine = parser.add_mutually_exclusive_group()
    engine.add_argument(
        "--local",
        dest="broker",
        action="store_const",
        const=None,
        help="render in this process and its children, no broker (default)",
    )
    engine.add_argument(
        "--broker",
        nargs="?",
        const="",
        default=None,
        type=_amqp_url,
        metavar="AMQP_URL",
        help=f"render through the worker fleet; URL default ${AMQP_URL_ENV} (or a file named by ${AMQP_URL_ENV}_FILE), "
        "else amqp://guest:guest@127.0.0.1:5672/ (write --broker=URL after INPUT)",
    )
    local = parser.add_argument_group("local engine")
    local.add_argument(
        "--workers",
        type=int_at_least(1),
        default=None,
        metavar="N",
        help=f"render processes (default: the usable cores, here {usable_cores()})",
    )
    add_config_argument(parser)
    # The fleet's size limit, same flag and variable as serve's: both engines answer a
    # larger job `payload_too_large`, as the fleet would, and the broker engine never
    # publishes it.
    add_setting_arguments(parser, ("max_message_bytes",))
    broker = parser.add_argument_group("broker engine")
    broker.add_argument(
        "--request-queue",
        default=None,
        metavar="NAME",
        help=f"the fleet's request queue (${REQUEST_QUEUE_ENV}; default build-prompt)",
    )
    broker.add_argument(
        "--window",
        type=int_at_least(1),
        default=None,
        metavar="N",
        help="input lines in flight between the writer and the newest job (default 256)",
    )
    broker.add_argument(
        "--timeout",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="wait for a reply this long, then publish once more, then record a timeout "
        "(default 60)",
    )
    add_setting_arguments(broker, _TLS_SETTINGS)
    add_budget_arguments(
        parser, "what would have been sent to a model with a smaller context window"
    )
    report = parser.add_argument_group("report and diffs")
    report.add_argument("--report", metavar="PATH", help="write the drift report as JSON")
    report.add_argument(
        "--html",
        metavar="PATH",
        help="write the drift page: one self-contained HTML file to review the changes "
        "(also: prompt-worker report INPUT OUTPUT --html PATH)",
    )
    report.add_argument(
        "--diff-dir",
        metavar="DIR",
        help="where unified diffs of changed jobs go (default OUTPUT.jsonl.diffs)",
    )
    diffs = report.add_mutually_exclusive_group()
    diffs.add_argument(
        "--diff-limit",
        type=int_at_least(0),
        default=DEFAULT_DIFF_LIMIT,
        metavar="N",
        help=f"diffs of the first N changed jobs (default {DEFAULT_DIFF_LIMIT})",
    )
    diffs.add_argument("--all-diffs", action="store_true", help="a diff for every changed job")
    report.add_argument(
        "--fail-on-drift",
        action="store_true",
        help="exit 1 when any job changed or failed to render (for CI)",
    )
    add_archive_arguments(
        parser, "re-render what serve recorded in the archive stream (docs/RERENDER.md)"
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted run: keep the complete records in OUTPUT, "
        "skip the input lines they answer",
    )
    parser.add_argument(
        "--progress",
        choices=MODES,
        default="auto",
        help="bar on a terminal, JSON log lines otherwise (auto); or off",
    )
    parser.add_argument(
        "--log-interval",
        type=_seconds,
        default=10.0,
        metavar="SECONDS",
        help="seconds between progress log lines (default 10)",
    )


def _broker_engine(args: argparse.Namespace) -> "Engine":
    # Imported here: the local engine must not pay for aio-pika at start-up.
    from worker.rerender.broker import DEFAULT_TIMEOUT, DEFAULT_WINDOW, BrokerEngine
    from worker.rerender.run import RerenderError
    from worker.transport.event_loop import EventLoopUnavailable
    from worker.transport.link.broker_failures import where_credentials_are
    from worker.transport.settings import SettingsError, resolve

    flags = {field: getattr(args, field) for field in _TLS_SETTINGS}
    # $PROMPT_WORKER_AMQP_URL(_FILE) and the queue variable are serve's, read the same way.
    flags.update(amqp_url=args.broker or None, request_queue=args.request_queue)
    try:
        settings = resolve(flags, os.environ)
    except SettingsError as exc:
        raise RerenderError(str(exc)) from None
    try:
        return BrokerEngine(
            settings.amqp_url,
            settings.request_queue,
            window=args.window or DEFAULT_WINDOW,
            timeout=args.timeout or DEFAULT_TIMEOUT,
            default_budget=_default_budget(args, check_tokenizer=False),
            tls=settings.tls,
            max_message_bytes=_max_message_bytes(args),
            # serve's variable: the run takes the event loop the fleet does.
            event_loop=settings.event_loop,
            # The URL of --broker URL is read as serve's --amqp-url: name the flag given.
            credentials_in="--broker"
            if args.broker
            else where_credentials_are(settings.source_of("amqp_url")),
        )
    except EventLoopUnavailable as exc:
        raise RerenderError(f"PROMPT_WORKER_EVENT_LOOP: {exc}") from None


def _max_message_bytes(args: argparse.Namespace) -> int:
    """--max-message-bytes, else $PROMPT_WORKER_MAX_MESSAGE_BYTES, else serve's default:
    the one reading of the limit, for both engines."""
    from worker.rerender.run import RerenderError
    from worker.transport.settings import SettingsError, resolve

    # Only this variable: the local engine must not fail on the fleet's other ones.
    env = {name: os.environ[name] for name in (MAX_MESSAGE_BYTES_ENV,) if name in os.environ}
    try:
        return resolve({"max_message_bytes": args.max_message_bytes}, env).max_message_bytes
    except SettingsError as exc:
        raise RerenderError(str(exc)) from None


def _default_budget(args: argparse.Namespace, *, check_tokenizer: bool) -> "Budget | None":
    """The budget of --budget/--tokenizer, for jobs without one: a fleet counts with its
    own tokenizers, a local run with this installation's."""
    from worker.rerender.run import RerenderError

    try:
        return default_budget(args, check_tokenizer=check_tokenizer)
    except BudgetArgumentError as exc:
        raise RerenderError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    from worker.heap import keep_freed_memory
    from worker.rerender.run import EXIT_INTERRUPTED, EXIT_USAGE, Options, RerenderError
    from worker.rerender.run import run as run_rerender
    from worker.rerender.sink import Engine

    # Records are built and freed a chunk at a time, in every engine: see worker/heap.py.
    keep_freed_memory()

    try:
        input_path, archive = _input(args)
    except ArchiveArgumentError as exc:
        print(f"prompt-worker rerender: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(
            "prompt-worker rerender: interrupted while reading the archive;"
            " re-run with --resume to continue",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    options = Options(
        input=input_path,
        archive=archive,
        output=args.out,
        report=args.report,
        html=args.html,
        diff_dir=args.diff_dir,
        diff_limit=None if args.all_diffs else args.diff_limit,
        resume=args.resume,
        fail_on_drift=args.fail_on_drift,
        progress=args.progress,
        log_interval=args.log_interval,
    )
    versions = None
    try:
        engine: Engine
        if args.broker is not None:
            engine = _broker_engine(args)
        else:
            from worker.render.renderer import Renderer
            from worker.rerender.local import LocalEngine

            default_budget = _default_budget(args, check_tokenizer=True)
            config = load_config_or_exit(args.config, "rerender")
            try:
                renderer = Renderer(
                    config,
                    default_budget=default_budget,
                    max_message_bytes=_max_message_bytes(args),
                )
            except ConfigError as exc:  # a family's start-up check of the configuration
                raise RerenderError(f"configuration error: {exc}") from None
            versions = renderer.template_versions()
            engine = LocalEngine(renderer, args.workers or usable_cores())
        return run_rerender(options, engine, renderer_template_versions=versions)
    except RerenderError as exc:
        print(f"prompt-worker rerender: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _input(args: argparse.Namespace) -> tuple[str, "dict[str, Any] | None"]:
    """INPUT, or the spool of the archive's records (`--from-archive`) and its read."""
    if args.from_archive is None:
        if args.input is None:
            raise ArchiveArgumentError("give INPUT.jsonl, or --from-archive AMQP_URL --since")
        return args.input, None
    if args.input is not None:
        raise ArchiveArgumentError("give INPUT.jsonl or --from-archive, not both")
    from worker.rerender.archive_input import spool_path

    source = archive_source(args, dict(os.environ))
    state = read_window(
        source, args.out, resume=args.resume, progress=args.progress, log_interval=args.log_interval
    )
    return str(spool_path(args.out)), state
