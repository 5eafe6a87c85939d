"""Progress inside one task of a stage: the task reports units as it goes, and the executor
running it in this process moves its progress bar (a task of hours, such as preparing one large
shard, no longer shows 0% until it ends). Elsewhere (a Ray worker) reporting does nothing."""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from typing import Callable, Iterator

__all__ = ["report_progress", "reporting_to"]

_TICK: ContextVar[Callable[[int], None] | None] = ContextVar("tapt_task_progress", default=None)


def report_progress(units: int) -> None:
    """Advance the running task's progress by `units` (of its stage's unit).

    Args:
        units: How many units were done since the last report.
    """
    tick = _TICK.get()
    if tick is not None and units > 0:
        tick(units)


@contextlib.contextmanager
def reporting_to(tick: Callable[[int], None]) -> Iterator[None]:
    """Within the block, `report_progress` calls `tick`.

    Args:
        tick: Called with the units each report gives.
    """
    token = _TICK.set(tick)
    try:
        yield
    finally:
        _TICK.reset(token)
