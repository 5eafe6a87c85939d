"""ReadAhead: the same items in order, in batches; the iterator's error surfaces in the consumer
after the good items; a bounded wait returns what is ready; closing stops the thread, which
never advances the iterator again."""

from __future__ import annotations

import threading
import time

import pytest

from tapt.indexer.building.readahead import ReadAhead


def drain(ahead: ReadAhead, most: int) -> list:
    got: list = []
    ended = False
    while not ended:
        batch, ended = ahead.take(most, wait=5)
        assert len(batch) <= most
        got += batch
    return got


@pytest.mark.parametrize("most", [1, 3, 1000])
def test_takes_everything_in_order(most):
    with ReadAhead(iter(range(100)), depth=2) as ahead:
        assert drain(ahead, most) == list(range(100))
        assert ahead.take(most, wait=0.01) == ([], True)      # ended stays ended
    with ReadAhead(iter([])) as ahead:
        assert drain(ahead, most) == []


def test_iterator_error_is_raised_in_the_consumer_after_the_good_items():
    def items():
        yield 1
        yield 2
        raise ValueError("bad input at line 3")

    got: list = []
    with ReadAhead(items(), depth=8) as ahead:
        time.sleep(0.2)                  # the error is queued behind the good items
        with pytest.raises(ValueError, match="line 3"):
            while True:
                batch, ended = ahead.take(10, wait=5)
                got += batch
                assert not ended
        assert ahead.take(10, wait=0.01) == ([], True)
    assert got == [1, 2]


def test_closing_stops_the_producer():
    produced: list = []

    def items():
        for i in range(10_000):
            produced.append(i)
            yield i

    before = threading.active_count()
    with ReadAhead(items(), depth=1) as ahead:
        got: list = []
        while len(got) < 4:
            got += ahead.take(1, wait=5)[0]
    time.sleep(0.3)
    assert got == [0, 1, 2, 3]
    assert len(produced) <= 7       # at most a couple of items ahead of the consumer
    assert threading.active_count() == before


def test_a_stalled_iterator_answers_empty_in_time_and_is_not_advanced_after_close():
    calls: list = []
    release = threading.Event()

    def items():
        yield 1
        calls.append("waiting")
        release.wait(5)                 # an iterator that stalls (a lost Ray worker)
        calls.append("resumed")
        yield 2
        calls.append("advanced after the consumer let go")
        yield 3

    ahead = ReadAhead(items(), depth=1)
    assert ahead.take(5, wait=5) == ([1], False)
    started = time.monotonic()
    assert ahead.take(5, wait=0.3) == ([], False)
    assert time.monotonic() - started < 3
    closing = threading.Thread(target=ahead.close)       # it waits for the thread to end
    closing.start()
    time.sleep(0.2)
    release.set()
    closing.join(timeout=10)
    time.sleep(0.2)
    assert "advanced after the consumer let go" not in calls


def test_lingering_gathers_the_items_that_come_soon_after_the_first():
    """With `linger` a take waits that long after its first item for more (up to `most`),
    and comes back once the iterator ends; without it, a take returns what is ready."""
    def slow(n: int, every: float):
        for i in range(n):
            time.sleep(every)
            yield i

    with ReadAhead(slow(6, 0.05), depth=8) as ahead:
        first, ended = ahead.take(100, wait=5)
        assert first == [0] and not ended            # nothing else was ready yet
    with ReadAhead(slow(6, 0.05), depth=8) as ahead:
        started = time.monotonic()
        batch, ended = ahead.take(100, wait=5, linger=5)
        assert batch == list(range(6)) and ended     # the end cut the linger short
        assert time.monotonic() - started < 3
    with ReadAhead(slow(40, 0.05), depth=64) as ahead:
        batch, ended = ahead.take(3, wait=5, linger=5)
        assert batch == [0, 1, 2] and not ended      # `most` cut it short
