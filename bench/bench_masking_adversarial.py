"""Render time of texts built to make secret masking slow (issue 15, item 1).

Plain script: `.venv/bin/python bench/bench_masking_adversarial.py [--quick]`.

1. The texts of the issue, in `session.alert_data` of a react job, rendered through
   `Renderer.render(body)`: `"password: "` repeated to 20, 40 and 200 KB, and
   `"the secret: rotation failed; "` repeated to 44 KB.
2. Every family of tests/masking/adversarial.py at two sizes (8 and 64 KB by default),
   with each prefilter engine: the cost per KB of the large text over the small one's
   (1 is linear, 8 quadratic), the worst families, and the slowest per KB.

Times are CPU time of this thread, the best of a few runs (`--runs`); the machine is
small and shared, so compare figures of one run. `--source DIR` imports the worker from
another checkout (e.g. an older commit unpacked with `git archive`) to measure it the
same way; `--max-seconds` skips a text whose first render took longer than that.
"""

import argparse
import gc
import importlib.util
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

REPO = Path(__file__).resolve().parent.parent


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--source", type=Path, help="import the worker from this checkout")
    parser.add_argument("--engine", action="append", help="engine(s) to run (default: all)")
    parser.add_argument("--runs", type=int, default=3, help="best of this many renders")
    parser.add_argument("--small", type=int, default=8, help="small size, KB")
    parser.add_argument("--large", type=int, default=64, help="large size, KB")
    parser.add_argument("--max-seconds", type=float, default=60.0)
    parser.add_argument("--quick", action="store_true", help="the issue's texts only")
    parser.add_argument("--only", help="only the families whose name holds this text")
    return parser.parse_args()


ARGS = _arguments()
sys.path.insert(0, str(ARGS.source.resolve() if ARGS.source else REPO))

import orjson  # noqa: E402

from worker.masking import prefilter  # noqa: E402
from worker.masking.config import MaskingConfig  # noqa: E402
from worker.masking.masker import Masker  # noqa: E402

# A checkout from before `worker/` was regrouped (issue 14), such as an older
# tree given with `--source`, has worker/config.py and worker/render.py.
_REGROUPED = ((ARGS.source or REPO) / "worker" / "render" / "renderer.py").exists()
WorkerConfig = importlib.import_module(
    "worker.render.config" if _REGROUPED else "worker.config"
).WorkerConfig
Renderer = importlib.import_module(
    "worker.render.renderer" if _REGROUPED else "worker.render"
).Renderer


class Rendering(Protocol):
    """What this script uses of a `Renderer`: its class comes from whichever checkout
    `--source` names, imported at run time, so mypy cannot see it."""

    masker: Masker | None

    def render(self, body: bytes) -> object: ...


def _load_families() -> ModuleType:
    """tests/masking/adversarial.py of this checkout, whatever `--source` says."""
    path = REPO / "tests" / "masking" / "adversarial.py"
    spec = importlib.util.spec_from_file_location("adversarial", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["adversarial"] = module
    spec.loader.exec_module(module)
    return module


ISSUE_TEXTS = [
    ('"password: " repeated', "password: ", 20),
    ('"password: " repeated', "password: ", 40),
    ('"password: " repeated', "password: ", 200),
    ('"the secret: rotation failed; " repeated', "the secret: rotation failed; ", 44),
]


def body(text: str) -> bytes:
    return orjson.dumps({"job_id": "bench", "kind": "react", "session": {"alert_data": text}})


def best_seconds(call: Callable[[], Any], runs: int) -> float:
    first = _timed(call)
    if first > ARGS.max_seconds:
        return first
    return min([first] + [_timed(call) for _ in range(runs - 1)])


def _timed(call: Callable[[], Any]) -> float:
    gc.collect()
    gc.disable()
    try:
        started = time.thread_time()
        call()
        return time.thread_time() - started
    finally:
        gc.enable()


def renderer(engine: str) -> Rendering:
    config = WorkerConfig(masking=MaskingConfig(groups=["secrets", "pii"]))
    rendering: Rendering = Renderer(config)
    rendering.masker = Masker(config.masking, engine=engine)
    return rendering


def engines() -> list[str]:
    present = ["python"]
    if prefilter.HYPERSCAN_AVAILABLE:
        present.append("hyperscan")
    if prefilter.libhs_available():
        present.append("libhs")
    return [e for e in present if not ARGS.engine or e in ARGS.engine]


def issue_table(engine: str) -> None:
    rendering = renderer(engine)
    print(f"\nThe issue's texts ({engine}): render(body), CPU time, best of {ARGS.runs}")
    print("| `session.alert_data` | size | render | per KB |")
    print("|---|---|---|---|")
    for label, unit, kb in ISSUE_TEXTS:
        data = body(unit * (kb * 1024 // len(unit)))

        # Defs, not lambdas with defaults: mypy cannot infer the type of those.
        def render(d: bytes = data) -> object:
            return rendering.render(d)

        seconds = best_seconds(render, ARGS.runs)
        print(f"| {label} | {kb} KB | {_duration(seconds)} | {_duration(seconds / kb)} |")


def families_table(engine: str, families: list[Any]) -> None:
    rendering = renderer(engine)
    rows = []
    for family in families:
        small = body(family.text(ARGS.small * 1024))
        large = body(family.text(ARGS.large * 1024))

        def render_small(d: bytes = small) -> object:
            return rendering.render(d)

        def render_large(d: bytes = large) -> object:
            return rendering.render(d)

        small_s = best_seconds(render_small, ARGS.runs)
        large_s = best_seconds(render_large, ARGS.runs)
        growth = (large_s / len(large)) / (small_s / len(small))
        rows.append((growth, large_s / (len(large) / 1024), family.name))
    rows.sort(reverse=True)
    print(
        f"\n{len(rows)} families ({engine}): cost per KB at {ARGS.large} KB over "
        f"{ARGS.small} KB: median {sorted(r[0] for r in rows)[len(rows) // 2]:.2f}, "
        f"max {rows[0][0]:.2f} ({rows[0][2]})"
    )
    print("| family (the 5 that grow most) | growth | per KB at the large size |")
    print("|---|---|---|")
    for growth, per_kb, name in rows[:5]:
        print(f"| {name} | {growth:.2f} | {_duration(per_kb)} |")
    slowest = sorted(rows, key=lambda r: r[1], reverse=True)[:5]
    print("| family (the 5 slowest per KB) | growth | per KB at the large size |")
    print("|---|---|---|")
    for growth, per_kb, name in slowest:
        print(f"| {name} | {growth:.2f} | {_duration(per_kb)} |")


def _duration(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.0f} µs"


def main() -> None:
    print(f"worker from {ARGS.source or REPO}")
    families = [f for f in _load_families().FAMILIES if not ARGS.only or ARGS.only in f.name]
    for engine in engines():
        issue_table(engine)
        if not ARGS.quick:
            families_table(engine, families)


if __name__ == "__main__":
    main()
