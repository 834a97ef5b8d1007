"""Cost of the masking stage on the two typical jobs (issue 7's performance budget).

Plain script: `.venv/bin/python bench/bench_masking.py [--quick]`. For each typical job
it prints the render time with masking off, then per prefilter engine available
(`python` always, `hyperscan` when the package is installed, `libhs` when the system's
libhyperscan5 is) the cost of
`mask_payload` alone as a share of that render time, for the full
`Renderer.render(body)` path and for the build-only `render_job` path, and the render
time with masking on. Then what each detector would cost if it ran on
every outside-world text without its anchor gate, and the prefilter pass alone.

The machine is small and shared: figures are the best of a few short repeats and are
noisy. Compare them within one run, not across runs.
"""

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from schemas.job import Job  # noqa: E402
from worker.masking import prefilter  # noqa: E402
from worker.masking.config import MaskingConfig  # noqa: E402
from worker.masking.masker import Masker  # noqa: E402
from worker.masking.text import TextView  # noqa: E402
from worker.render.config import load_config  # noqa: E402
from worker.render.renderer import Renderer  # noqa: E402

JOBS = REPO / "tests" / "bench_jobs"


def best_us(func: Callable[[], Any], number: int, repeat: int) -> float:
    """Best mean time of `repeat` runs of `number` calls, in microseconds."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        for _ in range(number):
            func()
        best = min(best, (time.perf_counter() - started) / number)
    return best * 1e6


def bench_job(name: str, engines: list[str], number: int, repeat: int) -> None:
    config = load_config(JOBS / "worker.yaml")
    body = (JOBS / name).read_bytes()
    # The typical jobs hold no secret, so masking leaves `data` as it is, run after run.
    data = orjson.loads(body)
    job = Job.model_validate(data)
    off = Renderer(config.model_copy(update={"masking": MaskingConfig(enabled=False)}))
    maskers = {engine: Masker(config.masking, engine=engine) for engine in engines}
    texts = [t for t in maskers[engines[0]].collect_texts(data)[0] if t]

    print(
        f"\n{name}: {len(body):,} bytes; {len(texts)} outside-world texts, "
        f"{sum(map(len, texts)):,} characters"
    )
    full_off = best_us(lambda: off.render(body), number, repeat)
    build_off = best_us(lambda: off.render_job(job), number, repeat)
    print(f"  masking off: render(body) {full_off:7.1f} us   render_job {build_off:7.1f} us")
    for engine, masker in maskers.items():
        on = Renderer(config)
        on.masker = masker
        mask = best_us(lambda m=masker: m.mask_payload(data), number, repeat)  # type: ignore[misc]
        full_on = best_us(lambda r=on: r.render(body), number, repeat)  # type: ignore[misc]
        print(
            f"  masking on ({engine:<9}): mask_payload {mask:6.1f} us = "
            f"{100 * mask / full_off:5.1f}% of render(body), "
            f"{100 * mask / build_off:5.1f}% of render_job   "
            f"(render(body) with masking {full_on:7.1f} us)"
        )
        scan = best_us(lambda p=masker.prefilter: p.scan(texts), number, repeat)  # type: ignore[misc]
        print(f"      of which the prefilter pass over all texts: {scan:6.1f} us")

    print("  per detector, forced on every text (no anchor gate; not what a job pays):")
    masker = maskers[engines[0]]
    for detector in masker.detectors:

        def run(apply: Any = detector.apply) -> None:
            for text in texts:
                apply(TextView(text))

        cost = best_us(run, max(3, number // 20), repeat)
        print(f"    {detector.name:<24} {cost:9.1f} us")


def leave_out(names: list[str], rounds: int) -> None:
    """What each detector's anchors cost the scan of the typical jobs: the `libhs` (else
    best) engine's pass with all detectors and with each of `names` disabled, measured
    in alternation, `rounds` times (median of the rounds' best of 200 scans)."""
    config = load_config(JOBS / "worker.yaml").masking
    variants = {
        "all": config,
        **{
            f"without {name}": config.model_copy(update={"disabled": [*config.disabled, name]})
            for name in names
        },
    }
    engine = "libhs" if prefilter.libhs_available() else "hyperscan"
    maskers = {label: Masker(cfg, engine=engine) for label, cfg in variants.items()}
    for job in ("typical_react_job.json", "typical_chat_job.json"):
        data = orjson.loads((JOBS / job).read_bytes())
        texts = maskers["all"].collect_texts(data)[0]
        samples: dict[str, list[float]] = {label: [] for label in maskers}
        for _ in range(rounds):
            for label, masker in maskers.items():
                # A def, not a lambda with defaults: mypy cannot infer the type of those.
                def scan(m: Masker = masker, t: list[Any] = texts) -> object:
                    return m.prefilter.scan(t)

                samples[label].append(best_us(scan, 1, 200))
        base = statistics.median(samples["all"])
        print(f"\n{job}: prefilter pass ({engine}), median of {rounds} rounds")
        for label, values in samples.items():
            cost = statistics.median(values)
            print(f"  {label:32} {cost:6.2f} us   ({cost - base:+.2f})")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (smoke run)")
    parser.add_argument(
        "--leave-out",
        help="comma-separated detectors: only compare the scan without each of them",
    )
    parser.add_argument("--rounds", type=int, default=31, help="rounds of --leave-out")
    args = parser.parse_args()
    if args.leave_out:
        leave_out(args.leave_out.split(","), args.rounds)
        return 0
    number, repeat = (40, 3) if args.quick else (300, 9)
    engines = ["python"] + (["hyperscan"] if prefilter.HYPERSCAN_AVAILABLE else [])
    engines += ["libhs"] if prefilter.libhs_available() else []
    print(f"prefilter engines: {', '.join(engines)}; the worker uses {engines[-1]}")
    for name in ("typical_react_job.json", "typical_chat_job.json"):
        bench_job(name, engines, number, repeat)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
