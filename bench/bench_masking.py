"""Cost of the masking stage on the two typical jobs (issue 7's performance budget).

Plain script: `.venv/bin/python bench/bench_masking.py [--quick]`. Prints, per typical
job, the render time with masking off and on (full `Renderer.render(body)` path and the
build-only `render_job` path), `mask_job` alone per prefilter engine, and what each
detector would cost if it ran on every text without its anchor gate.

The machine is small and shared: figures are the best of a few short repeats and are
noisy; compare them within one run, not across runs.
"""

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from schemas.job import Job  # noqa: E402
from worker.config import WorkerConfig, load_config  # noqa: E402
from worker.masking import prefilter  # noqa: E402
from worker.masking.config import MaskingConfig  # noqa: E402
from worker.masking.detectors import TextView  # noqa: E402
from worker.masking.masker import Masker  # noqa: E402
from worker.render import Renderer  # noqa: E402

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


def outside_texts(masker: Masker, job: Job) -> list[str]:
    return [v for _, _, v in masker._leaves(job) if isinstance(v, str) and v]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (CI smoke run)")
    args = parser.parse_args()
    number, repeat = (50, 3) if args.quick else (300, 7)

    base = load_config(JOBS / "worker.yaml")
    off = base.model_copy(update={"masking": MaskingConfig(enabled=False)})
    engines = ["python"] + (["hyperscan"] if prefilter.HYPERSCAN_AVAILABLE else [])
    print(f"prefilter engines available: {', '.join(engines)} (auto picks {engines[-1]})")

    for name in ("typical_react_job.json", "typical_chat_job.json"):
        body = (JOBS / name).read_bytes()
        job = Job.model_validate(orjson.loads(body))
        print(f"\n{name} ({len(body):,} bytes)")
        renderers: dict[str, Renderer] = {"off": Renderer(off)}
        for engine in engines:
            cfg: WorkerConfig = base
            renderer = Renderer(cfg)
            renderer.masker = Masker(cfg.masking, engine=engine)
            renderers[f"on/{engine}"] = renderer
        texts = outside_texts(renderers["on/python"].masker or Masker(base.masking), job)
        print(f"  outside-world text: {len(texts)} fields, {sum(map(len, texts)):,} chars")
        full_off = best_us(lambda r=renderers["off"]: r.render(body), number, repeat)
        build_off = best_us(lambda r=renderers["off"]: r.render_job(job), number, repeat)
        print(f"  render(body) masking off   {full_off:8.1f} us")
        print(f"  render_job   masking off   {build_off:8.1f} us")
        for label, renderer in renderers.items():
            if label == "off":
                continue
            full = best_us(lambda r=renderer: r.render(body), number, repeat)
            build = best_us(lambda r=renderer: r.render_job(job), number, repeat)
            assert renderer.masker is not None
            mask = best_us(lambda m=renderer.masker: m.mask_job(job), number, repeat)
            print(
                f"  masking {label:<15} mask_job {mask:7.1f} us = "
                f"{100 * mask / full_off:5.1f}% of render(body), "
                f"{100 * mask / build_off:5.1f}% of render_job; "
                f"measured render(body) {full:7.1f} us, render_job {build:7.1f} us"
            )

        masker = Masker(base.masking, engine="python")
        print("  per detector, forced on every field (no anchor gate):")
        for detector in masker.detectors:
            def run(d: Any = detector) -> None:
                for text in texts:
                    d.apply(TextView(text))

            print(f"    {detector.name:<24} {best_us(run, max(5, number // 10), repeat):9.1f} us")
        for engine in engines:
            pf = Masker(base.masking, engine=engine).prefilter
            cost = best_us(lambda p=pf: p.scan(texts), number, repeat)
            print(f"  prefilter scan ({engine:<9}) all fields, all anchors: {cost:7.1f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
