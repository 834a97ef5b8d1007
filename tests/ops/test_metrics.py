"""`Metrics.job_done`: what one answered job adds to the exported series."""

from typing import TypedDict

from worker.ops.metrics import EXEMPLAR_INTERVAL, ExemplarGate, Metrics


class _Done(TypedDict):
    """The keyword arguments every `job_done` call of a test below shares."""

    seconds: float
    request_bytes: int
    render_seconds: float


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_ok_jobs_count_by_kind_and_observe_every_histogram() -> None:
    metrics = Metrics("1.2.3")
    for _ in range(2):
        metrics.job_done(
            "react",
            "ok",
            "",
            seconds=0.002,
            request_bytes=20_000,
            render_seconds=0.0001,
            prompt_chars=25_000,
            masked={"token": 2},
        )
    metrics.job_done(
        "synthesis", "ok", "", seconds=0.003, request_bytes=50_000, render_seconds=0.0002
    )

    assert sample(metrics, "prompt_worker_jobs_total", kind="react", status="ok", code="") == 2
    assert sample(metrics, "prompt_worker_jobs_total", kind="synthesis", status="ok", code="") == 1
    assert sample(metrics, "prompt_worker_job_seconds_count", kind="react") == 2
    assert sample(metrics, "prompt_worker_job_seconds_sum", kind="react") == 0.004
    assert sample(metrics, "prompt_worker_render_seconds_count", kind="react") == 2
    assert sample(metrics, "prompt_worker_render_seconds_count", kind="synthesis") == 1
    assert sample(metrics, "prompt_worker_prompt_chars_sum", kind="react") == 50_000
    assert sample(metrics, "prompt_worker_request_bytes_count") == 3
    assert sample(metrics, "prompt_worker_request_bytes_sum") == 90_000
    assert sample(metrics, "prompt_worker_masked_total", detector="token") == 4


def test_error_jobs_count_their_code_but_observe_no_render() -> None:
    metrics = Metrics("1.2.3")
    metrics.job_done("unknown", "error", "invalid_json", seconds=0.001, request_bytes=10)
    metrics.job_done("unknown", "error", "invalid_json", seconds=0.001, request_bytes=10)
    metrics.job_done("react", "error", "invalid_job", seconds=0.001, request_bytes=10)

    assert (
        sample(
            metrics, "prompt_worker_jobs_total", kind="unknown", status="error", code="invalid_json"
        )
        == 2
    )
    assert (
        sample(
            metrics, "prompt_worker_jobs_total", kind="react", status="error", code="invalid_job"
        )
        == 1
    )
    assert sample(metrics, "prompt_worker_job_seconds_count", kind="unknown") == 2
    assert sample(metrics, "prompt_worker_render_seconds_count", kind="unknown") == 0
    assert sample(metrics, "prompt_worker_render_seconds_count", kind="react") == 0
    assert sample(metrics, "prompt_worker_prompt_chars_count", kind="react") == 0


def test_two_workers_in_one_process_keep_separate_counts() -> None:
    first, second = Metrics("1"), Metrics("1")
    first.job_done("react", "ok", "", seconds=0.001, request_bytes=1, render_seconds=0.001)
    assert sample(first, "prompt_worker_jobs_total", kind="react", status="ok", code="") == 1
    assert sample(second, "prompt_worker_jobs_total", kind="react", status="ok", code="") == 0


def test_trimmed_jobs_count_by_kind_with_the_tokens_they_left_out() -> None:
    metrics = Metrics("1.2.3")
    done: _Done = {"seconds": 0.001, "request_bytes": 10, "render_seconds": 0.001}
    metrics.job_done("react", "ok", "", **done, tokens_left_out=1200)
    metrics.job_done("react", "ok", "", **done, tokens_left_out=300)
    metrics.job_done("react", "ok", "", **done)  # fit: not trimmed
    metrics.job_done("legacy_react", "ok", "", **done, tokens_left_out=7)

    assert sample(metrics, "prompt_worker_budget_trimmed_total", kind="react") == 2
    assert sample(metrics, "prompt_worker_budget_tokens_left_out_total", kind="react") == 1500
    assert sample(metrics, "prompt_worker_budget_trimmed_total", kind="legacy_react") == 1
    assert sample(metrics, "prompt_worker_budget_tokens_left_out_total", kind="synthesis") == 0


def exemplars(metrics: Metrics, name: str) -> dict[str, str]:
    """Each bucket's (`le`) exemplar trace id of `name`'s buckets."""
    return {
        s.labels["le"]: s.exemplar.labels["trace_id"]
        for family in metrics.registry.collect()
        for s in family.samples
        if s.name == f"{name}_bucket" and s.exemplar is not None
    }


def test_a_bucket_takes_a_new_exemplar_at_most_once_an_interval() -> None:
    gate = ExemplarGate((0.001, 0.01))
    assert gate.admit(0.0005, now=100.0)  # the first in its bucket
    assert not gate.admit(0.0009, now=100.5)  # the same bucket, within the interval
    assert not gate.admit(0.001, now=100.5)  # on its bound: that bucket (le="0.001") too
    assert gate.admit(0.0011, now=100.5)  # the next bucket: its first
    assert gate.admit(0.02, now=100.5)  # the +Inf bucket
    assert not gate.admit(0.0001, now=100.0 + EXEMPLAR_INTERVAL - 0.01)
    assert gate.admit(0.0001, now=100.0 + EXEMPLAR_INTERVAL)


def test_the_first_sampled_job_of_a_bucket_is_its_exemplar_and_a_slow_one_gets_its_own() -> None:
    metrics = Metrics("1.2.3")
    done: _Done = {"seconds": 0.002, "request_bytes": 100, "render_seconds": 0.0004}
    metrics.job_done("react", "ok", "", **done, trace_id="a" * 32)
    metrics.job_done("react", "ok", "", **done, trace_id="b" * 32)  # the same buckets
    metrics.job_done("react", "ok", "", **done)  # not sampled
    slow: _Done = {"seconds": 0.3, "request_bytes": 100, "render_seconds": 0.2}
    metrics.job_done("react", "ok", "", **slow, trace_id="c" * 32)

    assert exemplars(metrics, "prompt_worker_job_seconds") == {"0.002": "a" * 32, "0.5": "c" * 32}
    assert exemplars(metrics, "prompt_worker_render_seconds") == {
        "0.0005": "a" * 32,
        "0.25": "c" * 32,
    }
    assert sample(metrics, "prompt_worker_job_seconds_count", kind="react") == 4
