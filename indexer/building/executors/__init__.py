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
        def reduce(self, stage: Stage, tasks: Sequence[T], merge: Stage) -> R | None: ...
        def available_memory(self) -> int | None: ...
        def task_memory_limit(self) -> int | None: ...
        def close(self) -> None: ...

`map` returns each task's result in task order, or raises the first task's exception after the
others have stopped; `imap` gives (place, result) as tasks finish, for a caller that folds the
results (the scan) and so holds one at a time; `reduce` merges every result into one with a
merge stage (the calibration's candidates): in this process by default, in a tree of merge tasks
on a Ray cluster, so that only the last merge reaches the driver. `available_memory` and
`task_memory_limit` tell the build plan where its tasks run (see `build_plan.Workers`). Prepare, embed and assemble tasks that already completed (their completion
record exists) are not passed to `map`: the driver filters them, so a rerun resumes; train and
index tasks return their existing record at once.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tapt.errors import InputError
from tapt.indexer.building.executor_base import (
    EXECUTORS,
    EncoderSource,
    EncoderSpec,
    Executor,
    Stage,
    register,
)
from tapt.indexer.building.executors.local import LocalExecutor
from tapt.indexer.building.executors.ray_executor import RayExecutor  # Ray is imported on use

__all__ = ["EncoderSource", "EncoderSpec", "Executor", "Stage", "LocalExecutor", "RayExecutor",
           "register", "executor_names", "executor_options", "get_executor", "make_executor"]


def executor_names() -> tuple[str, ...]:
    """The names of the registered executors, in listing order."""
    return EXECUTORS.names()


def executor_options() -> dict[str, tuple[str, dataclasses.Field]]:
    """Every registered executor's options (`Executor.Options`): (the executor's name, the
    field) by option name, in listing order.

    Raises:
        ValueError: two executors declare an option of the same name.
    """
    out: dict[str, tuple[str, dataclasses.Field]] = {}
    for name in executor_names():
        options = EXECUTORS[name].Options
        for option in dataclasses.fields(options) if options is not None else ():
            if option.name in out:
                raise ValueError(f"executors {out[option.name][0]} and {name} both have the "
                                 f"option {option.name!r}")
            out[option.name] = (name, option)
    return out


def make_options(name: str, given: dict[str, Any]) -> dict[str, Any]:
    """The constructor keywords of the executor `name` from its options given by name (those
    None left out: the executor's defaults).

    Raises:
        InputError: an option of another executor (named).
    """
    options = executor_options()
    out = {}
    for option, value in given.items():
        if value is None:
            continue
        owner = options[option][0]
        if owner != name:
            raise InputError(f"only applies with `executor` {owner}", param=option)
        out[option] = value
    return out


def get_executor(name: str | Executor | None = "local", **options: Any) -> Executor:
    """The executor called `name` (an Executor is returned as it is), made with `options`.

    Raises:
        InputError: no executor has that name.
    """
    if isinstance(name, Executor):
        return name
    try:
        cls = EXECUTORS[name or "local"]
    except KeyError:
        raise InputError(f"unknown executor {name!r}: use one of {', '.join(executor_names())}",
                         param="executor") from None
    return cls(**options)


def make_executor(spec: str | Executor | None, progress: bool = True) -> tuple[Executor, bool]:
    """(the executor, whether the caller made it and so closes it): an Executor object is used
    as it is; a name makes one (the local one with `progress`)."""
    if isinstance(spec, Executor):
        return spec, False
    name = spec or "local"
    return get_executor(name, **({"progress": progress} if name == "local" else {})), True

