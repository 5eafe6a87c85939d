"""A task reports its progress as it goes; the local executor moves the stage's bar by it,
never past the task's share, and the rest when the task ends."""

from __future__ import annotations

import tapt.indexer.building.executors.local as local_executor
from tapt.indexer.building.executors import LocalExecutor, Stage
from tapt.util.progress import report_progress


class _Bar:
    updates: list[int] = []

    def __init__(self, *args, **kwargs) -> None:
        _Bar.updates = []

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def update(self, n: int) -> None:
        _Bar.updates.append(n)


def test_a_task_moves_the_bar_while_it_runs(monkeypatch):
    monkeypatch.setattr(local_executor, "tqdm", _Bar)

    def work(task: int) -> int:
        for _ in range(3):
            report_progress(4)         # 12 reported of a task worth 10: capped at 10
        return task

    stage = Stage("prepare", work, unit="rec", weight=lambda t: 10)
    assert LocalExecutor(progress=True).map(stage, [1, 2]) == [1, 2]
    assert _Bar.updates == [4, 4, 2, 0, 4, 4, 2, 0]
    report_progress(5)                # outside a stage: nothing to move, no error

    quiet = Stage("prepare", lambda t: t, weight=lambda t: 7)
    LocalExecutor(progress=True).map(quiet, [1])
    assert _Bar.updates == [7]        # a task that reports nothing moves the bar at its end
