"""Masking on the typical jobs at this tree against another checkout, in one process.

    git archive <commit> | tar -x -C /tmp/before
    .venv/bin/python bench/bench_masking_versus.py /tmp/before [--rounds 41]

On a shared machine two benchmark runs a minute apart differ by more than a change to
masking does, so both trees are loaded side by side (the other checkout's `worker` and
`schemas` packages are copied under other names) and measured in alternation. Each
round times, for each typical job and each tree, `mask_payload` alone and
`Renderer.render(body)` with masking on and off (best of `--calls` calls, `libhs`
engine when present, as the worker runs); the report gives the median over the rounds
of this tree's time over the other's, and of each tree's masking overhead.
"""

import argparse
import importlib
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
JOBS = REPO / "tests" / "bench_jobs"
JOB_FILES = ("typical_react_job.json", "typical_chat_job.json")
_PACKAGES = ("worker", "schemas")


def load_other(checkout: Path, into: Path) -> dict[str, Any]:
    """The other checkout's modules the benchmark needs, imported as `_other_worker`..."""
    pattern = re.compile(r"\b(from|import) (worker|schemas)\b")
    for package in _PACKAGES:
        target = into / f"_other_{package}"
        shutil.copytree(checkout / package, target)
        for source in target.rglob("*.py"):
            text = source.read_text(encoding="utf-8")
            source.write_text(pattern.sub(r"\1 _other_\2", text), encoding="utf-8")
    sys.path.insert(0, str(into))
    import _other_worker.masking.config as masking_config  # type: ignore[import-not-found]
    import _other_worker.masking.masker as masker  # type: ignore[import-not-found]

    # A checkout from before `worker/` was regrouped (issue 14), such as an older
    # tree to measure against, has worker/config.py and worker/render.py.
    regrouped = (checkout / "worker" / "render" / "renderer.py").exists()
    config = importlib.import_module(
        "_other_worker.render.config" if regrouped else "_other_worker.config"
    )
    render = importlib.import_module(
        "_other_worker.render.renderer" if regrouped else "_other_worker.render"
    )
    return {
        "load_config": config.load_config,
        "MaskingConfig": masking_config.MaskingConfig,
        "Masker": masker.Masker,
        "Renderer": render.Renderer,
    }


def this_tree() -> dict[str, Any]:
    from worker.masking.config import MaskingConfig
    from worker.masking.masker import Masker
    from worker.render.config import load_config
    from worker.render.renderer import Renderer

    return {
        "load_config": load_config,
        "MaskingConfig": MaskingConfig,
        "Masker": Masker,
        "Renderer": Renderer,
    }


def calls(tree: dict[str, Any], job: str) -> dict[str, Callable[[], Any]]:
    config = tree["load_config"](JOBS / "worker.yaml")
    body = (JOBS / job).read_bytes()
    data = orjson.loads(body)
    on = tree["Renderer"](config)
    off = tree["Renderer"](
        config.model_copy(update={"masking": tree["MaskingConfig"](enabled=False)})
    )
    masker = on.masker
    assert masker is not None and not masker.mask_payload(orjson.loads(body))
    return {
        "mask_payload": lambda: masker.mask_payload(data),
        "render on": lambda: on.render(body),
        "render off": lambda: off.render(body),
    }


def best(call: Callable[[], Any], number: int) -> float:
    fastest = float("inf")
    for _ in range(number):
        started = time.perf_counter()
        call()
        fastest = min(fastest, time.perf_counter() - started)
    return fastest


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("other", type=Path, help="the other checkout (holds worker/)")
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temporary:
        trees = {"other": load_other(args.other.resolve(), Path(temporary)), "this": this_tree()}
        for job in JOB_FILES:
            timed = {name: calls(tree, job) for name, tree in trees.items()}
            samples: dict[str, list[float]] = {}
            for _ in range(args.rounds):
                round_: dict[str, float] = {}
                for name in ("other", "this"):
                    for what, call in timed[name].items():
                        round_[f"{name} {what}"] = best(call, args.calls)
                for name in ("other", "this"):
                    overhead = round_[f"{name} render on"] / round_[f"{name} render off"] - 1
                    samples.setdefault(f"{name} overhead", []).append(overhead)
                for what in ("mask_payload", "render on"):
                    ratio = round_[f"this {what}"] / round_[f"other {what}"]
                    samples.setdefault(f"this/other {what}", []).append(ratio)
                    samples.setdefault(f"other {what} us", []).append(round_[f"other {what}"])
                    samples.setdefault(f"this {what} us", []).append(round_[f"this {what}"])
            print(f"\n{job}, {args.rounds} rounds (median, and the middle half of the rounds)")
            for key, values in samples.items():
                quartiles = statistics.quantiles(values, n=4)
                scale, unit = (1e6, " µs") if key.endswith(" us") else (100, "%")
                if key.startswith("this/other"):
                    scale, unit = 1, "x"
                print(
                    f"  {key.removesuffix(' us'):28} {statistics.median(values) * scale:8.2f}{unit}"
                    f"   ({quartiles[0] * scale:.2f} to {quartiles[2] * scale:.2f})"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
