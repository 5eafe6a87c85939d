"""The embed stage's Ray Data pipeline, run by an actor of its own (`PipelineRunner`) that
hands the driver its rows in batches (`rows_within`): Ray Data's streaming executor, which
schedules the rows and polls its operators for as long as the stage lasts, is that actor's
work, not the driver's. The stage's Ray Data settings (`data_context`) apply where the
pipeline is made and where it runs."""

from __future__ import annotations

import contextlib
import logging
import warnings
from typing import Any, Callable, Iterator

from tapt.indexer.building.ray_cluster import POLL_SECONDS, Watch, env_options, task_error
from tapt.indexer.building.readahead import ReadAhead

# Ray Data settings of an embed stage (`data_context`)
_DATA_SETTINGS = {"max_errored_blocks": 0, "raise_original_map_exception": True,
                  "enable_progress_bars": False, "print_on_execution_start": False}


@contextlib.contextmanager
def data_context(ray) -> Iterator[None]:
    """Ray Data settings of one embed stage, restored afterwards: no errored block tolerated,
    the task's own exception raised, no bars or INFO lines of its own (tapt's bar counts
    sentences), and no errors or tracebacks on its console (`_no_errors`)."""
    ctx = ray.data.DataContext.get_current()
    saved = _apply_settings(ctx)
    logger = logging.getLogger("ray.data")
    level = logger.level
    consoles = [h for h in logger.handlers if "File" not in type(h).__name__]
    logger.setLevel(max(level, logging.WARNING))
    for handler in consoles:
        handler.addFilter(_no_errors)
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(ctx, k, v)
        logger.setLevel(level)
        for handler in consoles:
            handler.removeFilter(_no_errors)


def _apply_settings(ctx) -> dict[str, Any]:
    """`_DATA_SETTINGS` set on a Ray Data context (those it has); their values before."""
    saved = {k: getattr(ctx, k) for k in _DATA_SETTINGS if hasattr(ctx, k)}
    for k in saved:
        setattr(ctx, k, _DATA_SETTINGS[k])
    return saved


def _no_errors(record: logging.LogRecord) -> bool:
    """Ray Data's console, during a stage: its errors and their tracebacks stay in its own log
    file (ray-data.log); tapt reports a failed stage as one line."""
    return record.levelno < logging.ERROR and not record.exc_info


# what the actor that runs an embed stage's Ray Data pipeline holds: Ray Data's executor (its
# operators' state, up to `ray_executor.ROWS` rows of small records) and tapt's imports; the
# driver that ran it before peaked at 337 MB in a 10M-row build, its own work included
PIPELINE_MEMORY = 512 << 20
PIPELINE_ROWS = 64         # rows one call hands the driver at most
# How long one call waits for the first row (when none comes: one call a PIPELINE_WAIT), then
# for more rows: a call costs the driver 0.5 ms of CPU (0.27 on its main thread, measured), so
# a call whenever a part was ready grew with the rows (2,442 parts in a build of 10M rows), one
# every 2 s grows with the stage's wall time only, and a bar that moves every 2 s is alive.
PIPELINE_WAIT, PIPELINE_LINGER = 10.0, 2.0


class PipelineRunner:
    """A Ray actor that makes a Ray Data pipeline (`dataset()`: its input's blocks are put in
    the object store by this actor), runs it (its streaming executor, which polls its
    operators for as long as the stage lasts) and hands its rows to the driver in batches
    (`next`): that work is the actor's, not the driver's. The rows are iterated on a thread of
    the actor (`ReadAhead`), up to `PIPELINE_ROWS` x 4 ahead of the driver; the stage's Ray
    Data settings are applied in the actor's process (`data_context`)."""

    def __init__(self, dataset: Callable[[], Any]) -> None:
        import ray

        self._context = data_context(ray)
        self._context.__enter__()          # for the actor's life: it runs this stage only
        with warnings.catch_warnings():
            # Ray 2.60 sets retries, and an actor pool's restarts, only through
            # `ray_remote_args` (deprecated for 2.64); its defaults, unbounded, are what hangs
            # (ray #62746)
            warnings.simplefilter("ignore", DeprecationWarning)
            ds = dataset()
        if getattr(ds, "context", None) is not None:    # what it runs with: the stage's
            _apply_settings(ds.context)
        self._rows = ReadAhead((dict(row) for row in ds.iter_rows()),
                               depth=4 * PIPELINE_ROWS, name="tapt-pipeline")

    def next(self, most: int, wait: float, linger: float = 0.0
             ) -> tuple[list[dict[str, Any]], bool]:
        """(up to `most` rows, whether the pipeline has ended): waits up to `wait` seconds for
        the first row, then up to `linger` seconds for more. Raises the pipeline's error."""
        return self._rows.take(most, wait, linger)


def rows_within(ray, dataset: Callable[[], Any], watch: Watch, stage: str
                ) -> Iterator[dict[str, Any]]:
    """The rows of the Ray dataset `dataset()` makes as they come, the dataset made and its
    pipeline run by a `PipelineRunner` actor on this process's node (soft affinity: its
    executor's polling is not the driver's CPU, and it ends with the driver); whenever none
    came for a while the stage ends with the error `watch.check` returns, and with the task's
    error when one fails. Once the driver stops reading (an error, Ctrl-C, a stall) the actor
    is killed, and the pipeline's tasks and actors, which it owns, with it."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    options: dict[str, Any] = {"num_cpus": 0, "memory": PIPELINE_MEMORY, "max_restarts": 0,
                               **env_options()}
    with contextlib.suppress(Exception):      # a client connection has no node of its own
        options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(
            ray.get_runtime_context().get_node_id(), soft=True)

    def unless_stalled() -> None:
        stalled = watch.check()
        if stalled is not None:
            raise stalled

    runner = ray.remote(PipelineRunner).options(**options).remote(dataset)
    try:
        while True:
            ref = runner.next.remote(PIPELINE_ROWS, PIPELINE_WAIT, PIPELINE_LINGER)
            # while the actor waits for rows (or is slow to answer, on a loaded node), the
            # stage is checked as when no row comes
            while not ray.wait([ref], timeout=2 * POLL_SECONDS)[0]:
                unless_stalled()
            try:
                rows, ended = ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - a task's failure (Ray wraps it), as one tapt error
                raise task_error(exc, stage) from exc
            if rows:
                watch.progressed()
            else:
                unless_stalled()
            yield from rows
            if ended:
                return
    finally:
        with contextlib.suppress(Exception):
            ray.kill(runner, no_restart=True)
