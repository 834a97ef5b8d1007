"""The event loop's slice for quick renders, the retry pauses and the reply limit."""

import itertools
import time

import pytest

from worker.transport.consumer.reply_limit import limit_from_refusal
from worker.transport.processes.deadline import EventLoopSlice, SliceOverrun
from worker.transport.retry import MAX_BACKOFF, backoff


def spin(_: bytes) -> None:
    while True:
        pass


def test_a_call_past_its_slice_of_cpu_time_is_interrupted_even_in_a_busy_loop() -> None:
    bounded = EventLoopSlice(0.05)
    try:
        assert bounded.available
        with pytest.raises(SliceOverrun):
            bounded.run(spin, b"")
        # Waiting is not computing: only CPU time counts against the slice.
        assert bounded.run(lambda _: time.sleep(0.2), b"") is None
        # A quick call returns its result, and no timer is left to fire later.
        assert bounded.run(len, b"abc") == 3
        started = time.process_time()
        while time.process_time() - started < 0.1:
            pass
    finally:
        bounded.close()


def test_the_overrun_is_not_an_exception_the_renderer_would_catch() -> None:
    # Renderer.render turns any Exception into an `internal` reply.
    assert not issubclass(SliceOverrun, Exception)


def test_pauses_grow_with_each_delivery_up_to_a_cap() -> None:
    pauses = [backoff(attempt) for attempt in range(100)]
    assert pauses[0] > 0
    assert all(a <= b for a, b in itertools.pairwise(pauses))
    assert pauses[1] == 2 * pauses[0]
    assert max(pauses) == MAX_BACKOFF


def test_the_brokers_limit_is_read_from_its_refusal() -> None:
    refusal = Exception(
        "PRECONDITION_FAILED - message size 1290263 is larger than configured max size 1048576"
    )
    assert limit_from_refusal(refusal) == 1048576
    assert limit_from_refusal(Exception("NOT_FOUND - no queue 'x'")) is None
