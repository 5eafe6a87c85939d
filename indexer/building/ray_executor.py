"""The Ray executor: a build's stages on a Ray cluster (`--executor ray`).

prepare and assemble tasks run as Ray tasks (one CPU each); train and index tasks, whole-node
work (`Stage.whole_node`), as Ray tasks asking for the CPUs of the cluster's largest node, with
FAISS's OpenMP threads set to the CPUs Ray granted (and one GPU where a node has one, for
k-means and coarse assignment: Ray hides GPUs from tasks that do not ask); the embed stage runs
as a Ray Data pipeline, one row per part (`ray_embed`): CPU tasks read and tokenise each part
(the encoder's own length-sorted tokenisation), an autoscaling actor pool
(`ActorPoolStrategy(min_size, max_size)`, two parts in flight per actor) runs the model only,
each actor loading it once (from the build's `EncoderSpec`, or a copy of the encoder object
when there is none), and CPU tasks write each part through the same idempotent functions as
the local executor (temporary names renamed), so a retried step writes the same part.
Resuming is tapt's own: the driver passes only unfinished tasks (Ray Data keeps no state
between runs). `resources` steers steps to the nodes that offer a custom resource.

Ray is imported only when a `RayExecutor` is made; without it that fails with one error saying
what to install. Guarded pitfalls:

- an actor pool that takes every CPU leaves none for Ray Data's other tasks and hangs (ray issue
  44687): the pool is at most the cluster's CPUs - 1 (clamped, with a warning);
- a dead actor in a pool with unlimited restarts and errored blocks retries forever (62746):
  actors restart at most `retries` times, each call is retried at most `retries` times, no
  errored block is tolerated, and `timeout` seconds without a finished task end the stage;
- a worker that dies, and every error a task raises, reaches the caller as one exception (the
  task's own TaptError or OSError where it raised one, else ExecutorError), never a hang.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import socket
import uuid
import warnings
from typing import Any, Callable, Iterator, Sequence

from tqdm.auto import tqdm

from tapt.errors import InputError, TaptError
from tapt.util.checks import whole_number

from .executor_base import EncoderSource, EncoderSpec, Executor, Stage
from .ray_embed import ModelActor, granted_cpus, save_parts, tokenize_parts
from .readahead import read_ahead

log = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'tapt[ray]'"
DEFAULT_TIMEOUT = 3600.0
DEFAULT_RETRIES = 3


class ExecutorError(TaptError):
    """Work on the cluster failed (a worker died, the cluster went away, nothing progressed);
    finished work is kept for resuming."""


def import_ray(needed_by: str = "the ray executor", param: str | None = "executor"):
    """The `ray` module; InputError (about `param`) saying what to install when it is
    missing."""
    try:
        import ray
        import ray.data  # noqa: F401 - the embed stage needs Ray Data too
    except ImportError as exc:
        raise InputError(f"{needed_by} needs Ray, which is not installed: {INSTALL_HINT}",
                         param=param) from exc
    return ray


# Bounds of the Ray options (an infinite timeout or a huge retry count overflow Ray's own).
MAX_TIMEOUT = 10.0 ** 7          # seconds: ~116 days
MAX_RETRIES = 1000
_PROBE_SECONDS = 5.0


def _probe(address: str) -> None:
    """Refuse a HOST:PORT no Ray head answers at within seconds: `ray.init` retries such an
    address for many minutes, printing a warning every few seconds."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or "://" in address:
        return                                  # auto, ray://..., or a form Ray judges itself
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=_PROBE_SECONDS):
            pass
    except OSError as exc:
        raise ExecutorError(f"cannot connect to the Ray cluster at {address} (nothing answers "
                            f"there within {_PROBE_SECONDS:g} s: {exc.strerror or exc}); start "
                            "one with `ray start --head` or check the address",
                            param="address") from None


def connect(address: str | None = None, quiet: bool = True) -> bool:
    """Connect this process to Ray: an existing connection is used as it is; `address`
    ("auto", "HOST:PORT", "ray://...") joins a running cluster; None joins the cluster named by
    RAY_ADDRESS or starts a local one. Returns whether this call connected (and so may
    disconnect).

    Raises:
        ExecutorError: no cluster at that address.
    """
    ray = import_ray()
    if ray.is_initialized():
        return False
    _probe(address or os.environ.get("RAY_ADDRESS") or "")
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=not quiet,
                 logging_level=logging.WARNING, configure_logging=True)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = address or os.environ.get("RAY_ADDRESS") or "a new local cluster"
        raise ExecutorError(f"cannot connect to the Ray cluster at {where} ({_first_line(exc)});"
                            " start one with `ray start --head` or check the address",
                            param="address") from exc
    return True


def _no_auto_start() -> None:
    """Keep Ray from starting a new local cluster once tapt disconnects: a Ray Data thread still
    inside an abandoned iteration (after Ctrl-C or a stage's timeout) would otherwise start one
    on its next call. Ray reads this switch from RAY_ENABLE_AUTO_CONNECT once, at import."""
    os.environ["RAY_ENABLE_AUTO_CONNECT"] = "0"
    try:
        from ray._private import auto_init_hook
    except ImportError:         # pragma: no cover - another Ray layout: nothing to switch off
        return
    auto_init_hook.enable_auto_connect = False


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _first_line(exc: BaseException) -> str:
    text = _ANSI.sub("", str(exc)).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def task_error(exc: BaseException, stage: str, resumable: bool = True) -> BaseException:
    """What a failed Ray task or actor call becomes for the caller: the task's own TaptError or
    OSError (a full disk stays a full disk), else one ExecutorError line (`resumable`: a build
    stage, whose finished parts a rerun keeps)."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, (TaptError, OSError)) and not _is_ray_error(cause):
            return cause
        cause = getattr(cause, "cause", None) or cause.__cause__
    root = exc
    while getattr(root, "cause", None) is not None and root.cause is not root:
        root = root.cause
    if not resumable:
        return ExecutorError(f"the {stage} step failed on the Ray cluster ({_first_line(root)})")
    return ExecutorError(f"the {stage} stage failed on the Ray cluster ({_first_line(root)}); "
                         "the finished parts are kept: run the same command again to resume")


def _is_ray_error(exc: BaseException) -> bool:
    return type(exc).__module__.startswith("ray.")


def worker_source(encoder: EncoderSource) -> EncoderSource:
    """What an actor loads its model from: the build's spec; else, for tapt's own encoders,
    their model and backend; else a copy of the encoder object (small test encoders).

    Raises:
        InputError: none of these can reach another process.
    """
    from ray import cloudpickle

    if encoder.spec is not None:
        return EncoderSource(None, encoder.spec)
    loaded = encoder.get()
    if type(loaded).__module__.startswith("tapt.indexer."):  # tapt's own: loaded by its spec
        return EncoderSource(None, EncoderSpec(loaded.spec, "auto",
                                               getattr(loaded, "backend", "auto")))
    try:
        cloudpickle.dumps(loaded)
    except Exception as exc:  # noqa: BLE001 - any pickling failure means the same
        raise InputError(f"the encoder {type(loaded).__name__} cannot be sent to Ray workers "
                         f"({_first_line(exc)}); give the model by name or directory",
                         param="executor") from exc
    return EncoderSource(loaded, None)


def _run_task(fn, task):
    return fn(task)


def _run_whole_node(fn: Callable[[Any], Any], task: Any) -> Any:
    """Run a whole-node task with FAISS's OpenMP threads set to the CPUs Ray granted it (a
    worker starts with one); the worker's thread count is put back afterwards, for the next
    task it runs."""
    from ..ann.faiss_index import faiss_threads

    with faiss_threads(granted_cpus()):
        return fn(task)


class RayExecutor(Executor):
    """Runs a build's stages on a Ray cluster (see the module docstring).

    Args:
        address: The cluster: "auto", "HOST:PORT" or "ray://HOST:PORT" (default: RAY_ADDRESS,
            else a local cluster started here and stopped by `close`). A process already
            connected to Ray uses its connection.
        workers: Most actors in the embedding pool (default: GPUs / `gpus_per_worker` with
            GPUs, else the cluster's CPUs - 1; never more than CPUs - 1).
        gpus_per_worker: GPUs per embedding actor (0: CPU actors; 0.5: two actors per GPU).
        progress: Show a progress bar per stage.
        timeout: Seconds without any finished task before a stage fails.
        retries: Restarts of a dead actor, retries of a task whose worker died.
        min_workers: Fewest actors in the pool: it starts with these and Ray Data adds actors
            up to `workers` while parts wait for one (autoscaling).
        resources: Custom Ray resources a step's tasks or actors ask for, by step ("prepare",
            "tokenize", "embed" (the model actors), "save", "assemble", "train", "index",
            "calibrate"), to
            steer steps to the nodes that offer them: {"embed": {"gpu_box": 0.01}}.

    Raises:
        InputError: Ray is not installed, or a setting cannot work.
        ExecutorError: the cluster cannot be reached.
    """

    name = "ray"

    def __init__(self, address: str | None = None, workers: int | None = None,
                 gpus_per_worker: float = 0.0, progress: bool = True,
                 timeout: float = DEFAULT_TIMEOUT, retries: int = DEFAULT_RETRIES,
                 min_workers: int = 1,
                 resources: dict[str, dict[str, float]] | None = None) -> None:
        if workers is not None:
            whole_number(workers, "workers")
        whole_number(min_workers, "min_workers")
        if workers is not None and min_workers > workers:
            raise InputError(f"must be at most workers ({workers})", param="min_workers")
        self.resources = _checked_resources(resources)
        if not gpus_per_worker >= 0:
            raise InputError("must be 0 or more", param="gpus_per_worker")
        if gpus_per_worker > 1 and gpus_per_worker != int(gpus_per_worker):
            raise InputError(f"above 1 must be a whole number of GPUs (Ray's rule), got "
                             f"{gpus_per_worker:g}", param="gpus_per_worker")
        if not 0 < timeout < MAX_TIMEOUT:
            raise InputError(f"must be more than 0 and less than {MAX_TIMEOUT:g} seconds",
                             param="timeout")
        if not 0 <= retries <= MAX_RETRIES:
            raise InputError(f"must be 0 to {MAX_RETRIES}", param="retries")
        self.ray = import_ray()
        self.address, self.workers, self.gpus_per_worker = address, workers, float(gpus_per_worker)
        self.min_workers = int(min_workers)
        self.progress, self.timeout, self.retries = progress, float(timeout), int(retries)
        self._owned = connect(address, quiet=not progress)
        if self.gpus_per_worker > 0:       # refused now, not after the prepare stage
            try:
                self.pool_size()
            except BaseException:
                self.close()
                raise

    def close(self) -> None:
        if self._owned and self.ray.is_initialized():
            _no_auto_start()
            self.ray.shutdown()
        self._owned = False

    # ------------------------------------------------------------------ sizing

    def pool_size(self) -> int:
        """Actors of the embedding pool on this cluster (see `workers`), at most its CPUs - 1
        so that Ray Data's own tasks always find a CPU (ray issue 44687).

        Raises:
            InputError: the cluster has fewer than 2 CPUs, or none of the GPUs asked for.
        """
        resources = self.ray.cluster_resources()
        cpus, gpus = int(resources.get("CPU", 0)), float(resources.get("GPU", 0))
        if cpus < 2:
            raise InputError(f"the Ray cluster has {cpus} CPU(s): the embedding pool needs one "
                             "per worker plus one left free for Ray Data's other tasks "
                             "(ray issue 44687)", param="address")
        if self.gpus_per_worker > 0:
            if gpus < self.gpus_per_worker:
                raise InputError(f"the Ray cluster has {gpus:g} GPU(s), a worker needs "
                                 f"{self.gpus_per_worker:g}", param="gpus_per_worker")
            most = max((float(n.get("Resources", {}).get("GPU", 0)) for n in self.ray.nodes()
                        if n.get("Alive")), default=0.0)
            if most < self.gpus_per_worker:      # an actor's GPUs are on one node
                raise InputError(f"no node of the Ray cluster has {self.gpus_per_worker:g} "
                                 f"GPU(s) (the most on one node: {most:g}); a worker's GPUs "
                                 "must be on one node", param="gpus_per_worker")
            default = int(math.floor(gpus / self.gpus_per_worker + 1e-9))
        else:
            default = cpus - 1
        wanted = self.workers or default
        if wanted > cpus - 1:
            log.warning("%d embedding workers asked for, but the Ray cluster has %d CPUs: using "
                        "%d, leaving one CPU for Ray Data's other tasks (ray issue 44687)",
                        wanted, cpus, cpus - 1)
            wanted = cpus - 1
        return max(1, wanted)

    # ------------------------------------------------------------------ map

    def map(self, stage: Stage, tasks: Sequence[Any], encoder: EncoderSource | None = None
            ) -> list[Any]:
        if not tasks:
            return []
        if stage.needs_encoder:
            if encoder is None:
                raise InputError(f"stage {stage.name} needs an encoder")
            results = self._map_pool(stage, tasks, encoder)
        else:
            results = self._map_tasks(stage, tasks)
        return results

    def _bar(self, stage: Stage, tasks: Sequence[Any]) -> tqdm:
        weight = stage.weight or (lambda _: 1)
        return tqdm(total=sum(weight(t) for t in tasks), desc=f"{stage.name} (ray)",
                    unit=stage.unit, disable=not self.progress, dynamic_ncols=True,
                    smoothing=0.05)

    def whole_node(self) -> dict[str, int]:
        """Ray resources of one whole-node task: `num_cpus`, the CPUs of the largest alive node
        (never more than one node has, or the task would never be scheduled), and `num_gpus`,
        1 where a node has a GPU (then the largest such node's CPUs: an IVF build's k-means and
        coarse assignment run on it, through torch or faiss-gpu) unless TAPT_FAISS_GPU=0, else
        0."""
        from ..ann.faiss_index import gpu_steps_allowed

        nodes = [n.get("Resources", {}) for n in self.ray.nodes() if n.get("Alive")]
        gpu_nodes = [r for r in nodes if float(r.get("GPU", 0)) >= 1]
        gpus = 1 if gpu_nodes and gpu_steps_allowed() else 0
        cpus = max((int(r.get("CPU", 0)) for r in (gpu_nodes if gpus else nodes)), default=0)
        return {"num_cpus": max(1, cpus), "num_gpus": gpus}

    def _map_tasks(self, stage: Stage, tasks: Sequence[Any]) -> list[Any]:
        ray = self.ray
        if stage.whole_node:
            resources, run = self.whole_node(), _run_whole_node
            log.info("%s tasks ask Ray for %d CPU(s) and %d GPU(s) each", stage.name,
                     resources["num_cpus"], resources["num_gpus"])
        else:
            resources, run = {"num_cpus": 1}, _run_task
        if stage.name in self.resources:
            resources["resources"] = self.resources[stage.name]
        remote = ray.remote(**resources, max_retries=self.retries, retry_exceptions=False)(run)
        fn = ray.put(stage.fn)
        refs = [remote.remote(fn, task) for task in tasks]
        where = {ref: i for i, ref in enumerate(refs)}
        out: list[Any] = [None] * len(tasks)
        weight = stage.weight or (lambda _: 1)
        pending = list(refs)
        try:
            with self._bar(stage, tasks) as bar:
                while pending:
                    done, pending = ray.wait(pending, num_returns=1, timeout=self.timeout)
                    if not done:
                        raise ExecutorError(f"no {stage.name} task finished in "
                                            f"{self.timeout:g} s on the Ray cluster; the "
                                            "finished ones are kept: run the same command "
                                            "again to resume")
                    for ref in done:
                        i = where[ref]
                        try:
                            out[i] = ray.get(ref)
                        except Exception as exc:  # noqa: BLE001 - becomes one tapt error
                            raise task_error(exc, stage.name) from exc
                        bar.update(weight(tasks[i]))
        except BaseException:
            for ref in pending:
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
            raise
        return out

    def _map_pool(self, stage: Stage, tasks: Sequence[Any], encoder: EncoderSource
                  ) -> list[Any]:
        """The embed stage as a Ray Data pipeline, one row per part: tokenise (CPU tasks), the
        model (an autoscaling actor pool, two parts in flight per actor), save (CPU tasks);
        see `tokenize_parts`. A stage function not split into steps (`fn.steps`, as
        `stages.embed_part` is) runs whole in the actors."""
        from ray import cloudpickle
        from ray.data import ActorPoolStrategy

        from ..encoding.encoder import tokenizing_of

        ray = self.ray
        size = min(self.pool_size(), len(tasks))
        source = worker_source(encoder)
        steps = getattr(stage.fn, "steps", None)
        items = [{"i": i, "task": cloudpickle.dumps(t)} for i, t in enumerate(tasks)]
        tasks_args = {"num_cpus": 1, "max_retries": self.retries}
        with _data_context(ray), warnings.catch_warnings():
            # Ray 2.60 sets retries, and the pool's restarts, only through `ray_remote_args`
            # (deprecated for 2.64); its defaults, unbounded, are what hangs (ray #62746)
            warnings.simplefilter("ignore", DeprecationWarning)
            ds = ray.data.from_items(items, override_num_blocks=len(items))
            if steps is not None:
                tokenizing = cloudpickle.dumps(tokenizing_of(encoder.get()))
                ds = ds.map_batches(tokenize_parts, batch_size=1, batch_format="numpy",
                                    fn_kwargs={"steps": steps, "tokenizing": tokenizing,
                                               "key": uuid.uuid4().hex},
                                    **tasks_args, **self._steer("tokenize"))
            pool = ActorPoolStrategy(min_size=min(self.min_workers, size), max_size=size,
                                     max_tasks_in_flight_per_actor=ACTOR_PARTS_IN_FLIGHT)
            ds = ds.map_batches(
                ModelActor, batch_size=1, batch_format="numpy",
                fn_constructor_kwargs={"fn": stage.fn, "source": source},
                compute=pool, num_cpus=1, num_gpus=self.gpus_per_worker or None,
                max_restarts=self.retries, max_task_retries=self.retries,
                **self._steer("embed"))
            if steps is not None:
                ds = ds.map_batches(save_parts, batch_size=1, batch_format="numpy",
                                    fn_kwargs={"steps": steps}, **tasks_args,
                                    **self._steer("save"))
            out: list[Any] = [None] * len(tasks)
            weight = stage.weight or (lambda _: 1)
            with self._bar(stage, tasks) as bar:
                for row in _rows_within(ds, self.timeout, stage.name):
                    i = int(row["i"])
                    out[i] = json.loads(str(row["record"]))
                    bar.update(weight(tasks[i]))
        missing = [i for i, r in enumerate(out) if r is None]
        if missing:
            raise ExecutorError(f"the {stage.name} stage returned no result for {len(missing)} "
                                "task(s); the finished parts are kept: run the same command "
                                "again to resume")
        return out

    def _steer(self, step: str) -> dict[str, Any]:
        return {"resources": self.resources[step]} if step in self.resources else {}


STEPS = ("prepare", "tokenize", "embed", "save", "assemble", "train", "index", "calibrate")
# Parts sent to an actor at once: the next part's tokens arrive while it runs the current one.
ACTOR_PARTS_IN_FLIGHT = 2


def _checked_resources(resources: dict[str, dict[str, float]] | None
                       ) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for step, wanted in (resources or {}).items():
        if step not in STEPS:
            raise InputError(f"unknown step {step!r}: use one of {', '.join(STEPS)}",
                             param="resources")
        if not isinstance(wanted, dict) or not all(
                isinstance(k, str) and isinstance(v, (int, float)) and v > 0
                for k, v in wanted.items()):
            raise InputError(f"{step}: must map resource names to amounts above 0",
                             param="resources")
        out[step] = {k: float(v) for k, v in wanted.items()}
    return out


@contextlib.contextmanager
def _data_context(ray) -> Iterator[None]:
    """Ray Data settings of one embed stage, restored afterwards: no errored block tolerated,
    the task's own exception raised, no bars or INFO lines of its own (tapt's bar counts
    sentences)."""
    ctx = ray.data.DataContext.get_current()
    wanted = {"max_errored_blocks": 0, "raise_original_map_exception": True,
              "enable_progress_bars": False, "print_on_execution_start": False}
    saved = {k: getattr(ctx, k) for k in wanted if hasattr(ctx, k)}
    logger = logging.getLogger("ray.data")
    level = logger.level
    for k in saved:
        setattr(ctx, k, wanted[k])
    logger.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(ctx, k, v)
        logger.setLevel(level)


def _rows_within(ds, timeout: float, stage: str) -> Iterator[dict[str, Any]]:
    """The dataset's rows as they come (iterated on a thread); ExecutorError when none comes for
    `timeout` seconds, the task's error when one fails. Once the driver stops reading (an error,
    Ctrl-C, the timeout) the iteration is not advanced again."""
    stalled = ExecutorError(f"no {stage} part finished in {timeout:g} s on the Ray cluster; the "
                            "finished parts are kept: run the same command again to resume")
    try:
        yield from read_ahead(ds.iter_rows(), depth=64, timeout=timeout,
                              on_timeout=lambda: stalled)
    except Exception as exc:  # noqa: BLE001 - a task's failure (Ray wraps it), as one tapt error
        if exc is stalled:
            raise
        raise task_error(exc, stage) from exc
