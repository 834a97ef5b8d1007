"""Prometheus metrics of the worker.

The names are a contract with the Grafana dashboard and alert rules in deploy/: rename
nothing without changing them too. Each `Metrics` owns its `CollectorRegistry`, so
several workers (or tests) in one process do not share counters.
"""

import time
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from schemas.job import KIND_ALIASES, Kind

# Every exported metric family, as it appears in the exposition (histograms also
# expose `_bucket`, `_sum` and `_count` series under their name).
METRIC_NAMES: tuple[str, ...] = (
    "prompt_worker_jobs_total",
    "prompt_worker_render_seconds",
    "prompt_worker_job_seconds",
    "prompt_worker_in_flight",
    "prompt_worker_in_flight_bytes",
    "prompt_worker_in_flight_bytes_peak",
    "prompt_worker_render_timeouts_total",
    "prompt_worker_request_bytes",
    "prompt_worker_prompt_chars",
    "prompt_worker_reconnects_total",
    "prompt_worker_masked_total",
    "prompt_worker_budget_trimmed_total",
    "prompt_worker_budget_tokens_left_out_total",
    "prompt_worker_ready",
    "prompt_worker_broker_blocked",
    "prompt_worker_reply_refusals_total",
    "prompt_worker_replies_held",
    "prompt_worker_trace_spans_dropped_total",
    "prompt_worker_archive_records_total",
    "prompt_worker_build_info",
)

UNKNOWN_KIND = "unknown"
# A bucket's exemplar is replaced at most this often (seconds). A scraper reads one
# exemplar a bucket every 15 s or more, and setting one costs prometheus_client a
# validation, a tuple and a lock: with every job sampled, a fifth of tracing's cost.
EXEMPLAR_INTERVAL = 1.0
_KIND_LABELS: dict[str, str] = {k.value: k.value for k in Kind} | {
    alias: kind.value for alias, kind in KIND_ALIASES.items()
}

# From well under a typical job's render to a job near the size limit (docs/PERFORMANCE.md,
# "The builder" and "Event loop and large jobs", give both ends).
RENDER_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
# End to end adds the reply's publish confirm and any wait for the render helper.
JOB_BUCKETS = (
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)
# Up to the 32 MiB default limit, by powers of 4.
BYTES_BUCKETS = tuple(float(1024 * 4**i) for i in range(11))
CHARS_BUCKETS = tuple(float(1000 * 4**i) for i in range(10))


def kind_label(kind: str | None) -> str:
    """A bounded label value: a producer-chosen string never becomes a new series."""
    if kind is None:
        return UNKNOWN_KIND
    return _KIND_LABELS.get(kind, UNKNOWN_KIND)


@dataclass(frozen=True, slots=True)
class _KindSeries:
    """The labelled children of one job kind, resolved once: `labels()` would otherwise
    be paid four times a job (docs/PERFORMANCE.md, "The builder")."""

    job_seconds: Histogram
    render_seconds: Histogram
    prompt_chars: Histogram
    job_exemplars: "ExemplarGate"
    render_exemplars: "ExemplarGate"


@dataclass(slots=True)
class ExemplarGate:
    """Whether an observation of a histogram may replace its bucket's exemplar: the
    first in each bucket, then at most one a bucket every `interval` seconds, so that a
    rare slow bucket keeps getting fresh trace ids however busy the fast ones are."""

    bounds: Sequence[float]
    interval: float = EXEMPLAR_INTERVAL
    next_at: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.next_at = [0.0] * (len(self.bounds) + 1)  # + the +Inf bucket

    def admit(self, value: float, now: float) -> bool:
        bucket = bisect_left(self.bounds, value)  # the first bound >= value, as Prometheus
        if now < self.next_at[bucket]:
            return False
        self.next_at[bucket] = now + self.interval
        return True


class Metrics:
    def __init__(self, version: str, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.jobs = Counter(
            "prompt_worker_jobs",
            "Jobs answered, by kind, status and error code ('' when ok).",
            ("kind", "status", "code"),
            registry=r,
        )
        self.render_seconds = Histogram(
            "prompt_worker_render_seconds",
            "Time spent masking and building the messages of ok jobs.",
            ("kind",),
            buckets=RENDER_BUCKETS,
            registry=r,
        )
        self.job_seconds = Histogram(
            "prompt_worker_job_seconds",
            "End to end, from delivery received to request acknowledged.",
            ("kind",),
            buckets=JOB_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge(
            "prompt_worker_in_flight", "Deliveries being handled right now.", registry=r
        )
        self.in_flight_bytes_now = Gauge(
            "prompt_worker_in_flight_bytes",
            "Bytes of the job bodies being handled right now (bounded by the in-flight budget).",
            registry=r,
        )
        self.in_flight_bytes_peak = Gauge(
            "prompt_worker_in_flight_bytes_peak",
            "The most bytes of job bodies handled at once since the worker started.",
            registry=r,
        )
        self.render_timeouts = Counter(
            "prompt_worker_render_timeouts",
            "Renders abandoned for overrunning: where=event_loop moved to the helper, "
            "where=helper killed the helper process.",
            ("where",),
            registry=r,
        )
        self.request_bytes = Histogram(
            "prompt_worker_request_bytes",
            "Size of request bodies.",
            buckets=BYTES_BUCKETS,
            registry=r,
        )
        self.prompt_chars = Histogram(
            "prompt_worker_prompt_chars",
            "Characters in all messages of an ok reply.",
            ("kind",),
            buckets=CHARS_BUCKETS,
            registry=r,
        )
        self.budget_trimmed = Counter(
            "prompt_worker_budget_trimmed",
            "Ok jobs whose prompt was trimmed to fit their budget, by kind.",
            ("kind",),
            registry=r,
        )
        self.budget_tokens_left_out = Counter(
            "prompt_worker_budget_tokens_left_out",
            "Tokens (by each job's tokenizer) left out to fit budgets, by kind.",
            ("kind",),
            registry=r,
        )
        self.reconnects = Counter(
            "prompt_worker_reconnects", "Connections to the broker re-established.", registry=r
        )
        self.masked = Counter(
            "prompt_worker_masked",
            "Secrets masked before rendering, by detector.",
            ("detector",),
            registry=r,
        )
        self.ready = Gauge(
            "prompt_worker_ready",
            "1 when connected to the broker and consuming, else 0.",
            registry=r,
        )
        self.broker_blocked = Gauge(
            "prompt_worker_broker_blocked",
            "1 while the broker blocks the worker's connection (a memory or disk alarm): "
            "new deliveries wait, the worker is not ready.",
            registry=r,
        )
        self.reply_refusals = Counter(
            "prompt_worker_reply_refusals",
            "Replies the broker refused or lost (cause: nack, channel, connection): held "
            "and published again until confirmed, never dead-lettered for it.",
            ("cause",),
            registry=r,
        )
        self.replies_held = Gauge(
            "prompt_worker_replies_held",
            "Rendered replies the broker refused, held while they are published again.",
            registry=r,
        )
        self.trace_spans_dropped = Counter(
            "prompt_worker_trace_spans_dropped",
            "Trace spans dropped because the trace receiver was down or slow: the export "
            "queue was full, or an export failed after the exporter's retries (0 with "
            "tracing off).",
            registry=r,
        )
        self.archive_records = Counter(
            "prompt_worker_archive_records",
            "Archive records of answered jobs by outcome: written (confirmed by the "
            "stream), or lost: timeout, refused, unroutable, closed, failed "
            '(docs/ARCHIVE.md, "Outcomes").',
            ("outcome",),
            registry=r,
        )
        self.build_info = Gauge(
            "prompt_worker_build_info",
            "Always 1; the worker's version as a label.",
            ("version",),
            registry=r,
        )
        self.build_info.labels(version=version).set(1)
        self.ready.set(0)
        # Label values are bounded (kinds, statuses, error codes, detector names), so
        # these caches are too.
        self._kinds: dict[str, _KindSeries] = {}
        self._jobs: dict[tuple[str, str, str], Counter] = {}
        self._masked: dict[str, Counter] = {}

    def track_in_flight_bytes(self, used: Callable[[], float], peak: Callable[[], float]) -> None:
        """Read the in-flight bytes when scraped: nothing to update per job."""
        self.in_flight_bytes_now.set_function(used)
        self.in_flight_bytes_peak.set_function(peak)

    def render_timeout(self, where: str) -> None:
        """Count a render abandoned on the event loop or in the helper (`where`)."""
        self.render_timeouts.labels(where=where).inc()

    def _kind(self, kind: str) -> _KindSeries:
        series = self._kinds.get(kind)
        if series is None:
            series = self._kinds[kind] = _KindSeries(
                self.job_seconds.labels(kind=kind),
                self.render_seconds.labels(kind=kind),
                self.prompt_chars.labels(kind=kind),
                ExemplarGate(JOB_BUCKETS),
                ExemplarGate(RENDER_BUCKETS),
            )
        return series

    def job_done(
        self,
        kind: str,
        status: str,
        code: str,
        *,
        seconds: float,
        request_bytes: int,
        render_seconds: float | None = None,
        prompt_chars: int = 0,
        masked: dict[str, int] | None = None,
        tokens_left_out: int | None = None,
        trace_id: str | None = None,
    ) -> None:
        """Count one answered job; `render_seconds` only for ok jobs. `kind` is a label
        from `kind_label`. `tokens_left_out` only for jobs trimmed to fit a budget.
        `trace_id` (hex, a sampled trace) becomes the latency histograms' exemplar,
        shown to a scraper that asks for OpenMetrics, when its bucket's gate admits it."""
        key = (kind, status, code)
        counter = self._jobs.get(key)
        if counter is None:
            counter = self._jobs[key] = self.jobs.labels(kind=kind, status=status, code=code)
        counter.inc()
        series = self._kind(kind)
        exemplar = None if trace_id is None else {"trace_id": trace_id}
        now = time.monotonic() if exemplar is not None else 0.0
        admitted = exemplar is not None and series.job_exemplars.admit(seconds, now)
        series.job_seconds.observe(seconds, exemplar if admitted else None)
        self.request_bytes.observe(request_bytes)
        if render_seconds is not None:
            admitted = exemplar is not None and series.render_exemplars.admit(render_seconds, now)
            series.render_seconds.observe(render_seconds, exemplar if admitted else None)
            series.prompt_chars.observe(prompt_chars)
        if tokens_left_out is not None:
            # Rare (only trimmed jobs): no cache of the labelled children needed.
            self.budget_trimmed.labels(kind=kind).inc()
            self.budget_tokens_left_out.labels(kind=kind).inc(tokens_left_out)
        if masked:
            for detector, count in masked.items():
                child = self._masked.get(detector)
                if child is None:
                    child = self._masked[detector] = self.masked.labels(detector=detector)
                child.inc(count)
