"""What `serve` does to the garbage collector once it has started."""

import gc
import weakref
from collections.abc import Iterator

import pytest

from worker.collector import YOUNG_THRESHOLD, settle_after_start_up


@pytest.fixture(autouse=True)
def collector_restored() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


class Cycle:
    def __init__(self) -> None:
        self.me = self


def test_start_up_objects_are_frozen_and_the_young_swept_less_often() -> None:
    kept = [{"model": n} for n in range(1000)]
    middle, oldest = gc.get_threshold()[1:]

    frozen = settle_after_start_up()

    assert frozen == gc.get_freeze_count() >= len(kept)
    scanned = {id(o) for o in gc.get_objects()}
    assert not any(id(model) in scanned for model in kept)
    assert gc.get_threshold() == (YOUNG_THRESHOLD, middle, oldest)


def test_garbage_of_start_up_is_collected_not_frozen() -> None:
    garbage = weakref.ref(Cycle())  # unreachable, kept alive only by its cycle

    settle_after_start_up()

    assert garbage() is None


def test_cycles_made_by_jobs_are_still_collected_without_being_asked() -> None:
    settle_after_start_up()
    garbage = weakref.ref(Cycle())

    # Enough new containers to start a sweep of the youngest generation on their own.
    made: list[list[int]] = [[] for _ in range(YOUNG_THRESHOLD * 2)]

    assert garbage() is None
    assert len(made) == YOUNG_THRESHOLD * 2
