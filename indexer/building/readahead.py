"""Run an iterator on a thread, a bounded number of items ahead of its consumer, who takes them
in batches with a wait of its own choosing.

The embed stage's Ray Data pipeline is iterated so (`ray_pipeline.PipelineRunner`): the
iteration runs Ray Data's executor, and the driver asks for the rows that are ready, waiting a
bounded time, so that it can check in between whether the stage still makes progress. Errors
raised by the iterator surface in the consumer after the items before them; closing stops the
thread.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Generic, Iterator, TypeVar

T = TypeVar("T")
_DONE = object()


class ReadAhead(Generic[T]):
    """`items` iterated on a daemon thread, up to `depth` items ahead of the consumer, who
    takes them with `take`; once closed (`close`, or leaving a `with` block) the iterator is
    never advanced again.

    Args:
        items: The iterator to run on the thread.
        depth: How many items may wait for the consumer.
        name: The thread's name.
    """

    def __init__(self, items: Iterator[T], depth: int = 1, name: str = "tapt-read-ahead"
                 ) -> None:
        self._buffer: queue.Queue = queue.Queue(maxsize=max(1, depth))
        self._stop = threading.Event()
        self._ended = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._produce, args=(items,), name=name,
                                        daemon=True)
        self._thread.start()

    def _put(self, value: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._buffer.put(value, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _produce(self, items: Iterator[T]) -> None:
        try:
            for item in items:
                if not self._put((item, None)):
                    return
            self._put((_DONE, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, re-raised there
            self._put((_DONE, exc))

    def take(self, most: int, wait: float | None = None, linger: float = 0.0
             ) -> tuple[list[T], bool]:
        """Up to `most` items, and whether the iterator has ended (every item taken): waits
        up to `wait` seconds (None: no limit) for the first item, then up to `linger` seconds
        more for others (0: takes those ready).

        Raises:
            The iterator's error, once the items before it are taken.
        """
        if self._error is not None:
            error, self._error = self._error, None
            self._ended = True
            raise error
        if self._ended:
            return [], True
        got: list[T] = []
        try:
            item, error = self._buffer.get(timeout=wait)
            until = time.monotonic() + linger
            while True:
                if item is _DONE:
                    if error is None or not got:
                        self._ended = True
                        if error is not None:
                            raise error
                        return got, True
                    self._error = error       # raised by the next call, after these items
                    return got, False
                got.append(item)
                if len(got) >= most:
                    return got, False
                left = until - time.monotonic()
                item, error = (self._buffer.get(timeout=left) if left > 0
                               else self._buffer.get_nowait())
        except queue.Empty:
            return got, False

    def close(self) -> None:
        """Stop the thread (the iterator is not advanced again)."""
        self._stop.set()
        self._thread.join(timeout=5)

    def __enter__(self) -> "ReadAhead[T]":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
