"""read_ahead: same items in order, producer errors surface in the consumer, early exit stops it."""

from __future__ import annotations

import threading
import time

import pytest

from tapt.indexer.building.readahead import read_ahead


def test_yields_everything_in_order():
    assert list(read_ahead(iter(range(100)), depth=2)) == list(range(100))
    assert list(read_ahead(iter([]))) == []


def test_producer_error_is_raised_in_the_consumer_after_the_good_items():
    def items():
        yield 1
        yield 2
        raise ValueError("bad input at line 3")

    got = []
    with pytest.raises(ValueError, match="line 3"):
        for x in read_ahead(items()):
            got.append(x)
    assert got == [1, 2]


def test_consumer_that_stops_early_stops_the_producer():
    produced = []

    def items():
        for i in range(10_000):
            produced.append(i)
            yield i

    before = threading.active_count()
    for x in read_ahead(items(), depth=1):
        if x == 3:
            break
    time.sleep(0.3)
    assert len(produced) <= 6  # at most a couple of items ahead of the consumer
    assert threading.active_count() == before


def test_a_stalled_producer_times_out_and_is_not_advanced_again():
    calls = []
    release = threading.Event()

    def items():
        yield 1
        calls.append("waiting")
        release.wait(5)                 # a producer that stalls (a lost Ray worker)
        calls.append("resumed")
        yield 2
        calls.append("advanced after the consumer let go")
        yield 3

    got = []
    with pytest.raises(RuntimeError, match="stalled"):
        for x in read_ahead(items(), timeout=0.3, on_timeout=lambda: RuntimeError("stalled")):
            got.append(x)
    release.set()
    time.sleep(0.5)
    assert got == [1] and "advanced after the consumer let go" not in calls
