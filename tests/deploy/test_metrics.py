"""Every metric the dashboard and the alert rules query exists.

A renamed metric does not break a dashboard loudly: the panel just goes empty. So each
PromQL expression in deploy/grafana/build-prompt-worker.json and
deploy/prometheus/alerts.yml is taken apart here, and every series it selects must be
one the worker exports (worker.ops.metrics, read from a live registry so histogram and
counter suffixes are the real ones) or one documented below for RabbitMQ's plugin.
Label names used on worker metrics must be labels those metrics have.
"""

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from worker.ops.metrics import METRIC_NAMES, Metrics

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "build-prompt-worker.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"

# RabbitMQ's rabbitmq_prometheus plugin, /metrics/detailed endpoint, as documented in
# the plugin's metrics-detailed.md (RabbitMQ 3.10+), with their labels:
#   family queue_coarse_metrics:
#     rabbitmq_detailed_queue_messages_ready    messages ready to be delivered
#     rabbitmq_detailed_queue_messages_unacked  delivered, not yet acknowledged
#     rabbitmq_detailed_queue_messages          ready + unacked: total queue depth
#   family queue_consumer_count:
#     rabbitmq_detailed_queue_consumers         consumers on a queue
# deploy/prometheus/prometheus.yml asks for exactly these two families.
RABBITMQ_METRICS: dict[str, frozenset[str]] = {
    name: frozenset({"vhost", "queue"})
    for name in (
        "rabbitmq_detailed_queue_messages_ready",
        "rabbitmq_detailed_queue_messages_unacked",
        "rabbitmq_detailed_queue_messages",
        "rabbitmq_detailed_queue_consumers",
    )
}
# Synthesised by Prometheus itself for every scrape target.
PROMETHEUS_METRICS: dict[str, frozenset[str]] = {"up": frozenset()}
# Labels Prometheus attaches to every scraped series.
TARGET_LABELS = frozenset({"instance", "job"})

PROMQL_FUNCTIONS_AND_KEYWORDS = frozenset(
    {
        "sum", "avg", "min", "max", "count", "rate", "increase", "delta", "deriv",
        "histogram_quantile", "absent", "clamp_min", "by", "without", "on", "ignoring",
        "group_left", "group_right", "and", "or", "unless", "bool", "offset",
    }
)  # fmt: skip


def worker_series() -> dict[str, frozenset[str]]:
    """Series name -> label names, for every series the worker's registry can expose."""
    metrics = Metrics(version="test")
    labels = {
        collector._name: frozenset(collector._labelnames)  # prometheus_client internals
        for collector in vars(metrics).values()
        if hasattr(collector, "_labelnames")
    }
    series: dict[str, frozenset[str]] = {}
    for family in metrics.registry.collect():
        names = labels[family.name]
        if family.type == "counter":
            series[family.name + "_total"] = names
        elif family.type == "histogram":
            for suffix in ("_bucket", "_sum", "_count"):
                series[family.name + suffix] = names | ({"le"} if suffix == "_bucket" else set())
        else:
            series[family.name] = names
    return series


KNOWN = {**worker_series(), **RABBITMQ_METRICS, **PROMETHEUS_METRICS}


def dashboard_queries() -> Iterator[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield f"panel {panel['title']!r}", target["expr"]


def alert_queries() -> Iterator[tuple[str, str]]:
    for group in yaml.safe_load(ALERTS.read_text(encoding="utf-8"))["groups"]:
        for rule in group["rules"]:
            yield f"alert {rule['alert']}", rule["expr"]


QUERIES = [*dashboard_queries(), *alert_queries()]


def read_promql(expr: str) -> tuple[list[tuple[str, set[str]]], set[str]]:
    """The selectors of `expr` as (metric, label names matched), and the labels it groups by.

    A small PromQL reader, enough for these files: ranges and grouping clauses are
    removed, then every identifier that is not a function or keyword is a metric name,
    followed by its optional {matchers} (which may hold Grafana $variables).
    """
    grouping: set[str] = set()
    for clause in re.finditer(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", expr):
        grouping |= {label.strip() for label in clause.group(1).split(",") if label.strip()}
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range selectors, incl. $__rate_interval
    found = []
    for match in re.finditer(r"([A-Za-z_:][\w:]*)\s*(\{[^}]*\})?", text):
        name, matchers = match.group(1), match.group(2) or ""
        if name in PROMQL_FUNCTIONS_AND_KEYWORDS or text[match.end() :].lstrip().startswith("("):
            continue
        matched = set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", matchers))
        found.append((name, matched))
    return found, grouping


def test_the_reader_finds_metrics_and_labels() -> None:
    # Guard the guard: the reader must see every selector of a typical expression.
    expr = (
        "histogram_quantile(0.99, sum by (le, kind) (rate(prompt_worker_render_seconds_bucket"
        '{kind="react"}[$__rate_interval]))) / sum(up{job="x"}) > 0.5'
    )
    assert read_promql(expr) == (
        [("prompt_worker_render_seconds_bucket", {"kind"}), ("up", {"job"})],
        {"le", "kind"},
    )
    found, _ = read_promql('sum(rate(prompt_worker_jobz_total{queue="$q"}[5m]))')
    assert found == [("prompt_worker_jobz_total", {"queue"})]
    assert "prompt_worker_jobz_total" not in KNOWN


def test_worker_registry_matches_its_declared_names() -> None:
    exposed = set(worker_series())
    histograms = {name.removesuffix("_bucket") for name in exposed if name.endswith("_bucket")}
    assert set(METRIC_NAMES) <= exposed | histograms
    assert exposed <= {
        name + suffix for name in METRIC_NAMES for suffix in ("", "_bucket", "_sum", "_count")
    }


@pytest.mark.parametrize(("where", "expr"), QUERIES, ids=[where for where, _ in QUERIES])
def test_every_queried_metric_exists(where: str, expr: str) -> None:
    found, grouping = read_promql(expr)
    assert found, f"{where}: no metric found in {expr!r}"
    for name, matched in found:
        assert name in KNOWN, f"{where}: unknown metric {name!r}"
        unknown = matched - KNOWN[name] - TARGET_LABELS
        assert not unknown, f"{where}: {name} has no label(s) {sorted(unknown)}"
    available = set().union(*(KNOWN[name] for name, _ in found)) | TARGET_LABELS
    assert grouping <= available, f"{where}: grouping by {sorted(grouping - available)}"


def test_dashboard_covers_the_operational_questions() -> None:
    used = {name for _, expr in dashboard_queries() for name, _ in read_promql(expr)[0]}
    for needed in (
        "prompt_worker_jobs_total",
        "prompt_worker_job_seconds_bucket",
        "prompt_worker_render_seconds_bucket",
        "prompt_worker_prompt_chars_bucket",
        "prompt_worker_in_flight",
        "prompt_worker_reconnects_total",
        "rabbitmq_detailed_queue_messages_ready",
        "rabbitmq_detailed_queue_messages",
        "rabbitmq_detailed_queue_consumers",
    ):
        assert needed in used, needed


def test_dashboard_panels_have_unique_ids_and_datasource() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert panel["targets"], panel["title"]


def alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_alerts_cover_dead_letters_errors_consumers_and_latency() -> None:
    rules = {rule["alert"]: rule for rule in alert_rules()}
    assert "rabbitmq_detailed_queue_messages" in rules["BuildPromptDeadLetterQueueGrowing"]["expr"]
    assert 'status="error"' in rules["BuildPromptErrorRateHigh"]["expr"]
    assert "rabbitmq_detailed_queue_consumers" in rules["BuildPromptNoConsumers"]["expr"]
    assert "prompt_worker_job_seconds_bucket" in rules["BuildPromptLatencyHigh"]["expr"]
    for rule in rules.values():
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert rule["annotations"]["summary"]
