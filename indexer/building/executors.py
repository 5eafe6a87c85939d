"""Executors: what runs the stage functions of a build (and the per-shard work of other commands).

Every stage of `tapt index build` (see `stages`) is a plain module-level function of one small,
picklable task (paths, shard name, part number, settings) that is idempotent and writes only
through temporary names renamed into place. An executor decides where the tasks run; the stage
functions do not know. `LocalExecutor` runs them one after another in this process (with a
progress bar); a Ray executor runs the same functions as Ray tasks, and the embedding stage in
an actor pool that loads the model once per actor (`EncoderSource.spec`).

    class Executor:
        name: str
        def map(self, stage: Stage, tasks: Sequence[T], encoder: EncoderSource | None = None
                ) -> list[R]: ...
        def imap(self, stage: Stage, tasks: Sequence[T]) -> Iterator[tuple[int, R]]: ...
        def available_memory(self) -> int | None: ...
        def task_memory_limit(self) -> int | None: ...
        def close(self) -> None: ...

`map` returns each task's result in task order, or raises the first task's exception after the
others have stopped; `imap` gives (place, result) as tasks finish, for a caller that folds the
results (the scan, the calibration) and so holds one at a time. `available_memory` and
`task_memory_limit` tell the build plan where its tasks run (see `build_plan.Workers`). Prepare, embed and assemble tasks that already completed (their completion
record exists) are not passed to `map`: the driver filters them, so a rerun resumes; train and
index tasks return their existing record at once.
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

from tqdm.auto import tqdm

from tapt.errors import InputError
from tapt.indexer.building.executor_base import EncoderSource, EncoderSpec, Executor, Stage
from tapt.indexer.building.ray_executor import RayExecutor  # Ray itself is imported on use
from tapt.util.progress import reporting_to

__all__ = ["EncoderSource", "EncoderSpec", "Executor", "Stage", "LocalExecutor", "RayExecutor",
           "register_executor", "executor_names", "get_executor", "make_executor"]


class LocalExecutor(Executor):
    """Runs the tasks one after another in this process.

    Args:
        progress: Show a progress bar per stage.
    """

    name = "local"

    def __init__(self, progress: bool = True) -> None:
        self.progress = progress

    def map(self, stage: Stage, tasks: Sequence[Any], encoder: EncoderSource | None = None
            ) -> list[Any]:
        model = encoder.get() if stage.needs_encoder and encoder is not None else None
        if stage.needs_encoder and model is None:
            raise InputError(f"stage {stage.name} needs an encoder")
        return [result for _, result in self._run(stage, tasks, model)]

    def imap(self, stage: Stage, tasks: Sequence[Any]) -> Iterator[tuple[int, Any]]:
        yield from self._run(stage, tasks, None)

    def _run(self, stage: Stage, tasks: Sequence[Any], model: Any
             ) -> Iterator[tuple[int, Any]]:
        if not tasks:
            return
        weight = stage.weight or (lambda _: 1)
        with tqdm(total=sum(weight(t) for t in tasks), desc=stage.name, unit=stage.unit,
                  disable=not self.progress, dynamic_ncols=True, smoothing=0.05) as bar:
            for i, task in enumerate(tasks):
                done = [0]

                def tick(units: int, total: int = weight(task)) -> None:
                    step = max(0, min(units, total - done[0]))    # never past the task's share
                    done[0] += step
                    bar.update(step)

                with reporting_to(tick):
                    result = stage.fn(task, model) if stage.needs_encoder else stage.fn(task)
                bar.update(weight(task) - done[0])
                yield i, result


_EXECUTORS: dict[str, type[Executor]] = {"local": LocalExecutor, "ray": RayExecutor}


def register_executor(cls: type[Executor]) -> type[Executor]:
    """Class decorator: make an executor available by its `name` (`--executor NAME`)."""
    _EXECUTORS[cls.name] = cls
    return cls


def executor_names() -> tuple[str, ...]:
    return tuple(_EXECUTORS)


def get_executor(name: str | Executor | None = "local", **options: Any) -> Executor:
    """The executor called `name` (an Executor is returned as it is), made with `options`.

    Raises:
        InputError: no executor has that name.
    """
    if isinstance(name, Executor):
        return name
    try:
        cls = _EXECUTORS[name or "local"]
    except KeyError:
        raise InputError(f"unknown executor {name!r}: use one of {', '.join(_EXECUTORS)}",
                         param="executor") from None
    return cls(**options)


def make_executor(spec: str | Executor | None, progress: bool = True) -> tuple[Executor, bool]:
    """(the executor, whether the caller made it and so closes it): an Executor object is used
    as it is; a name makes one (the local one with `progress`)."""
    if isinstance(spec, Executor):
        return spec, False
    name = spec or "local"
    return get_executor(name, **({"progress": progress} if name == "local" else {})), True

