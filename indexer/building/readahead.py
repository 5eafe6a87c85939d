"""Run a generator on a thread, a bounded number of items ahead of its consumer.

The build reads and splits the next window of documents while the current one is embedded (the
encoders release the GIL), so reading costs no wall time as long as it is faster than embedding.
Errors raised by the generator surface in the consumer; closing the consumer stops the thread.
"""

from __future__ import annotations

import queue
import threading
from typing import Callable, Iterator, TypeVar

T = TypeVar("T")
_DONE = object()


def read_ahead(items: Iterator[T], depth: int = 1, timeout: float | None = None,
               on_timeout: Callable[[], BaseException | None] | None = None) -> Iterator[T]:
    """Yield what `items` yields, produced up to `depth` items ahead on a daemon thread.

    Args:
        items: The iterator to run on the thread (it is never advanced again once the consumer
            stops: closed, an error, a timeout).
        depth: How many items may wait for the consumer.
        timeout: Seconds to wait for the next item (None: no limit).
        on_timeout: Asked whenever `timeout` passes without an item: the exception to raise,
            or None to wait another `timeout` (default: TimeoutError at once).
    """
    buffer: queue.Queue = queue.Queue(maxsize=max(1, depth))
    stop = threading.Event()

    def put(value) -> bool:
        while not stop.is_set():
            try:
                buffer.put(value, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put((item, None)):
                    return
            put((_DONE, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, re-raised there
            put((_DONE, exc))

    thread = threading.Thread(target=produce, name="tapt-read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            try:
                item, error = buffer.get(timeout=timeout)
            except queue.Empty:
                stalled = on_timeout() if on_timeout else TimeoutError(f"no item in {timeout:g} s")
                if stalled is None:
                    continue
                raise stalled from None
            if item is _DONE:
                if error is not None:
                    raise error
                return
            yield item
    finally:
        stop.set()
        thread.join(timeout=5)
