"""Python's cyclic garbage collector in a long-running `serve` process.

Start-up leaves tens of thousands of long-lived objects behind (modules, models,
schemas, detectors, and with tracing on the OpenTelemetry SDK), and a job makes
thousands of short-lived containers that reference counting frees at once. With
CPython's defaults the collector scanned the first over and over, at every full
collection (about 50 ms each), and swept the youngest generation every 700 allocations,
while a job's own objects were mostly still in use: together about 7% of a job's CPU
with tracing off (21 µs of ~300), more with it on, measured in docs/PERFORMANCE.md
("The garbage collector").

Once start-up is done, its objects are frozen (never scanned again) and the youngest
generation is swept less often. Garbage in cycles is still collected, a little later.
"""

import gc

# Allocations between two sweeps of the youngest generation (CPython's default: 700).
YOUNG_THRESHOLD = 10_000


def settle_after_start_up() -> int:
    """Collect start-up's garbage, freeze what is left, sweep the young less often;
    the number of objects frozen."""
    gc.collect()
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, oldest)
    return gc.get_freeze_count()
