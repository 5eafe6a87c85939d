"""The local executor: a build's stages one after another in this process (`--executor local`,
the default)."""

from __future__ import annotations

from typing import Any, Iterator, Sequence

from tqdm.auto import tqdm

from tapt.errors import InputError
from tapt.indexer.building.executor_base import EncoderSource, Executor, Stage, register
from tapt.util.progress import reporting_to


@register
class LocalExecutor(Executor):
    """Runs the tasks one after another in this process.

    Args:
        progress: Show a progress bar per stage.
    """

    name = "local"
    order = 0

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
