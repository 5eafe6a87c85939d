"""Progress inside one task of a stage: the task reports units as it goes, and the executor
running it in this process moves its progress bar (a task of hours, such as preparing one large
shard, no longer shows 0% until it ends). Elsewhere (a Ray worker) reporting does nothing.

Steps of a computation with no count known ahead (a selection method's fits and passes over
the rows) are reported the same way (`report_step`); `showing_steps` shows them as a bar that
moves with each step and names the last one.

Both are also where long work can be stopped: within a `deadline` block, a report (or
`check_deadline`) past the block's time raises `DeadlineExceeded`, so a served request's
selection ends at its next step once the request's time is over instead of holding the
server."""

from __future__ import annotations

import contextlib
import time
from contextvars import ContextVar
from typing import Callable, Iterator

from tapt.errors import DeadlineExceeded

__all__ = ["report_progress", "reporting_to", "report_step", "showing_steps", "deadline",
           "check_deadline"]

_TICK: ContextVar[Callable[[int], None] | None] = ContextVar("tapt_task_progress", default=None)
_STEP: ContextVar[Callable[[str], None] | None] = ContextVar("tapt_steps", default=None)
_DEADLINE: ContextVar[tuple[float, float] | None] = ContextVar("tapt_deadline", default=None)


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Within the block, work that reports its progress or steps (or calls `check_deadline`)
    raises `DeadlineExceeded` at its first report after `seconds` from now.

    Args:
        seconds: The time the block's work has.
    """
    token = _DEADLINE.set((time.monotonic() + max(0.0, seconds), seconds))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def check_deadline() -> None:
    """Raise `DeadlineExceeded` when the open `deadline` block's time is over; nothing
    outside one."""
    ends = _DEADLINE.get()
    if ends is not None and time.monotonic() > ends[0]:
        raise DeadlineExceeded(f"stopped: the work's time ({ends[1]:g} s) ran out")


def report_progress(units: int) -> None:
    """Advance the running task's progress by `units` (of its stage's unit).

    Args:
        units: How many units were done since the last report.
    """
    check_deadline()
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


def report_step(what: str) -> None:
    """One more step of the computation under way (what it is, in a few words); nothing
    unless a `showing_steps` block is open.

    Args:
        what: The step, e.g. "fit the classifier".
    """
    check_deadline()
    step = _STEP.get()
    if step is not None:
        step(what)


@contextlib.contextmanager
def showing_steps(desc: str, enabled: bool = True) -> Iterator[None]:
    """Within the block, each `report_step` moves a progress bar (`desc`: its name) and shows
    the step; the bar counts the steps and the time since the block began.

    Args:
        desc: The bar's name, e.g. "score fused".
        enabled: False: no bar (steps are not shown).
    """
    if not enabled:
        yield
        return
    from tqdm.auto import tqdm

    with tqdm(desc=desc, unit="step", dynamic_ncols=True, leave=False,
              bar_format="{desc}: {n_fmt} steps [{elapsed}{postfix}]") as bar:
        def step(what: str) -> None:
            bar.set_postfix_str(what, refresh=False)
            bar.update(1)

        token = _STEP.set(step)
        try:
            yield
        finally:
            _STEP.reset(token)
