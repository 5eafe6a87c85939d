"""The Ray executor: a build's stages on a Ray cluster (`--executor ray`).

prepare and assemble tasks run as Ray tasks (one CPU each); train and index tasks, whole-node
work (`Stage.whole_node`), as Ray tasks asking for the CPUs of the cluster's largest node, with
FAISS's OpenMP threads set to the CPUs Ray granted (and one GPU where that node's FAISS can use
one for k-means and coarse assignment, asked there: Ray hides GPUs from tasks that do not ask); the embed stage runs
as a Ray Data pipeline over the parts (`ray_embed`; a row of it holds up to 16 consecutive
parts, so a build has at most 256 rows where it can: `part_groups`): CPU tasks read and
tokenise each part (the encoder's own length-sorted tokenisation), an autoscaling actor pool
(`ActorPoolStrategy(min_size, max_size)`, two rows in flight per actor) runs the model only,
each actor loading it once (from the build's `EncoderSpec`, or a copy of the encoder object
when there is none), and CPU tasks write each part through the same idempotent functions as
the local executor (temporary names renamed), so a retried step writes the same part. The
pipeline is run by an actor of its own (`PipelineRunner`, no CPU, on the driver's node where it
can), which hands the driver its rows in batches: Ray Data's executor, which polls its operators
for as long as the stage lasts, is not the driver's work.
Resuming is tapt's own: the driver passes only unfinished tasks (each finished part's
completion record is the state; Ray Data's own checkpointing, `DataContext.checkpoint_config`,
is for pipelines that end in a Ray Data write, which this one does not). `resources` steers
steps to the nodes that offer a custom resource.

Every task and actor asks Ray for the memory its stage declares (`Stage.memory`, from the build
plan), so Ray places no more of them on a node than its memory holds, and runs in a
`runtime_env` carrying this process's tapt and Hugging Face settings (`worker_env`: `TAPT_*`,
`HF_*`), so a variable set in the user's shell reaches every worker of a cluster started
elsewhere. What depends on the machine is decided where the work runs: the memory a budget of
"auto" takes its share of, and whether whole-node FAISS work asks for a GPU, come from a probe
task on the node that work runs on (`node_facts`).

Ray is imported only when a `RayExecutor` is made; without it that fails with one error saying
what to install. Guarded pitfalls:

- an actor pool that takes every CPU leaves none for Ray Data's other tasks and hangs (ray issue
  44687): the pool is at most the cluster's CPUs - 1 (clamped, with a warning);
- a dead actor in a pool with unlimited restarts and errored blocks retries forever (62746):
  actors restart at most `ray_retries` times, each call is retried at most `ray_retries` times,
  no errored block is tolerated, and `ray_timeout` seconds without a finished task end the
  stage;
- work that no alive node can run any more (its node lost, no other offering its resources)
  waits for nothing: once that has lasted `LOST_AFTER` seconds the stage ends with one error,
  whatever `ray_timeout` says;
- a worker that dies, and every error a task raises, reaches the caller as one exception (the
  task's own TaptError or OSError where it raised one, else ExecutorError), never a hang.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import uuid
from typing import Any, Callable, Iterator, Sequence

from tqdm.auto import tqdm

from tapt.errors import InputError
from tapt.indexer.building.executor_base import (
    MERGE_FANIN,
    EncoderSource,
    EncoderSpec,
    Executor,
    Stage,
    register,
)
from tapt.indexer.building.ray_cluster import (  # noqa: F401
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT,
    MAX_RETRIES,
    MAX_TIMEOUT,
    POLL_SECONDS,
    ExecutorError,
    RayOptions,
    Watch,
    _first_line,
    _no_auto_start,
    connect,
    env_options,
    import_ray,
    node_facts,
    task_error,
)
from tapt.indexer.building.ray_embed import ModelActor, granted_cpus, save_parts, tokenize_parts
from tapt.indexer.building.ray_pipeline import PIPELINE_MEMORY, rows_within
from tapt.util.checks import renamed_keywords, whole_number

log = logging.getLogger(__name__)

def worker_source(encoder: EncoderSource) -> EncoderSource:
    """What an actor loads its model from: the build's spec; else, for tapt's own encoders,
    their model and backend; else a copy of the encoder object (an encoder registered in this
    process, which a worker's registry may not hold; small test encoders).

    Raises:
        InputError: none of these can reach another process.
    """
    from ray import cloudpickle

    from tapt.indexer.encoding.registered import registered

    if encoder.spec is not None and not registered(encoder.spec.model):
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


def _need(options: dict[str, Any]) -> dict[str, float]:
    """What a task of these `ray.remote` options needs of a node (`Watch`'s lost-node check)."""
    return {"CPU": float(options["num_cpus"]), "GPU": float(options.get("num_gpus", 0)),
            "memory": float(options.get("memory", 0)), **options.get("resources", {})}


def _run_merge(fn: Callable[[list[Any]], Any], *parts: Any) -> Any:
    return fn(list(parts))


def _flagged(run: Callable[..., Any], fn: Any, *args: Any) -> tuple[bool, Any]:
    """(True, `run(fn, *args)`): a task of a reduce returns a tiny flag the driver fetches as
    the task finishes (a failure is its error at once) beside its result, which it does not
    fetch (a merge task gets it as an argument, which Ray resolves on that worker)."""
    return True, run(fn, *args)


def _run_whole_node(fn: Callable[[Any], Any], task: Any) -> Any:
    """Run a whole-node task with FAISS's OpenMP threads set to the CPUs Ray granted it (a
    worker starts with one); the worker's thread count is put back afterwards, for the next
    task it runs."""
    from tapt.indexer.ann.faiss_index import faiss_threads

    with faiss_threads(granted_cpus()):
        return fn(task)


@register
class RayExecutor(Executor):
    """Runs a build's stages on a Ray cluster (see the module docstring). Its options are
    named as the build's (`RayOptions`); `workers`, `timeout` and `retries`, the old names of
    `ray_workers`, `ray_timeout` and `ray_retries`, are taken for one release with a warning.

    Args:
        ray_address: The cluster: "auto", "HOST:PORT" or "ray://HOST:PORT" (default:
            RAY_ADDRESS, else a local cluster started here and stopped by `close`). A process
            already connected to Ray uses its connection. (`address`, its old name, is taken
            for one release with a warning.)
        ray_workers: Most actors in the embedding pool (default: GPUs / `gpus_per_worker`
            with GPUs, else the cluster's CPUs - 1; never more than CPUs - 1).
        gpus_per_worker: GPUs per embedding actor (0: CPU actors; 0.5: two actors per GPU).
        progress: Show a progress bar per stage.
        ray_timeout: Seconds without any finished task before a stage fails.
        ray_retries: Restarts of a dead actor, retries of a task whose worker died.
        min_workers: Fewest actors in the pool: it starts with these and Ray Data adds actors
            up to `ray_workers` while parts wait for one (autoscaling).
        resources: Custom Ray resources a step's tasks or actors ask for, by step ("prepare",
            "tokenize", "embed" (the model actors), "save", "assemble", "train", "index",
            "calibrate", "scan", "publish"), to
            steer steps to the nodes that offer them: {"embed": {"gpu_box": 0.01}}.

    Raises:
        InputError: Ray is not installed, or a setting cannot work.
        ExecutorError: the cluster cannot be reached.
    """

    name = "ray"
    order = 10
    Options = RayOptions

    @renamed_keywords(address="ray_address", workers="ray_workers", timeout="ray_timeout",
                      retries="ray_retries")
    def __init__(self, ray_address: str | None = None, ray_workers: int | None = None,
                 gpus_per_worker: float = 0.0, progress: bool = True,
                 ray_timeout: float = DEFAULT_TIMEOUT, ray_retries: int = DEFAULT_RETRIES,
                 min_workers: int = 1,
                 resources: dict[str, dict[str, float]] | None = None) -> None:
        if ray_workers is not None:
            whole_number(ray_workers, "ray_workers")
        whole_number(min_workers, "min_workers")
        if ray_workers is not None and min_workers > ray_workers:
            raise InputError(f"must be at most ray_workers ({ray_workers})", param="min_workers")
        self.resources = _checked_resources(resources)
        if not gpus_per_worker >= 0:
            raise InputError("must be 0 or more", param="gpus_per_worker")
        if gpus_per_worker > 1 and gpus_per_worker != int(gpus_per_worker):
            raise InputError(f"above 1 must be a whole number of GPUs (Ray's rule), got "
                             f"{gpus_per_worker:g}", param="gpus_per_worker")
        if not 0 < ray_timeout < MAX_TIMEOUT:
            raise InputError(f"must be more than 0 and less than {MAX_TIMEOUT:g} seconds",
                             param="ray_timeout")
        if not 0 <= ray_retries <= MAX_RETRIES:
            raise InputError(f"must be 0 to {MAX_RETRIES}", param="ray_retries")
        self.ray = import_ray()
        self.ray_address, self.ray_workers = ray_address, ray_workers
        self.gpus_per_worker = float(gpus_per_worker)
        self.min_workers = int(min_workers)
        self.progress = progress
        self.ray_timeout, self.ray_retries = float(ray_timeout), int(ray_retries)
        self._facts: dict[str, dict[str, Any]] = {}
        self._owned = connect(ray_address, quiet=not progress)
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
        """Actors of the embedding pool on this cluster (see `ray_workers`), at most its CPUs - 1
        so that Ray Data's own tasks always find a CPU (ray issue 44687).

        Raises:
            InputError: the cluster has fewer than 2 CPUs, or none of the GPUs asked for.
        """
        resources = self.ray.cluster_resources()
        cpus, gpus = int(resources.get("CPU", 0)), float(resources.get("GPU", 0))
        if cpus < 2:
            raise InputError(f"the Ray cluster has {cpus} CPU(s): the embedding pool needs one "
                             "per worker plus one left free for Ray Data's other tasks "
                             "(ray issue 44687)", param="ray_address")
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
        wanted = self.ray_workers or default
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

    def _alive(self) -> list[dict[str, Any]]:
        return [n for n in self.ray.nodes() if n.get("Alive")]

    def _offering(self, step: str) -> list[dict[str, Any]]:
        """The alive nodes that offer the custom resources `step` is steered to."""
        wanted = self.resources.get(step, {})
        return [n for n in self._alive()
                if all(float(n.get("Resources", {}).get(k, 0)) >= v for k, v in wanted.items())]

    def node_facts(self, step: str = "index") -> dict[str, Any]:
        """The whole-node work of `step` ("train", "index"): the node it runs on (the largest
        of those that offer its resources, a GPU node where one is there and TAPT_FAISS_GPU
        does not forbid it) and what that node offers, from a probe task run there (`node_facts`): `node_id`,
        `num_cpus`, `num_gpus` (1 or 0), `available` (bytes free there, None where unknown).
        Cached per step."""
        if step in self._facts:
            return self._facts[step]
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nodes = self._offering(step)
        if not nodes:
            raise ExecutorError(f"no alive node of the Ray cluster offers the resources the "
                                f"{step} step is steered to ({self.resources.get(step)})",
                                param="resources")

        def cpus(n: dict[str, Any]) -> int:
            return int(n.get("Resources", {}).get("CPU", 0))

        def probe(node: dict[str, Any]) -> dict[str, Any]:
            remote = self.ray.remote(num_cpus=0, max_retries=self.ray_retries, **env_options())(
                node_facts)
            strategy = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
            try:
                return self.ray.get(remote.options(scheduling_strategy=strategy).remote(),
                                    timeout=min(self.ray_timeout, 300.0))
            except Exception as exc:  # noqa: BLE001 - one tapt error
                raise task_error(exc, step, resumable=False) from exc

        gpu_nodes = [n for n in nodes if float(n.get("Resources", {}).get("GPU", 0)) >= 1]
        chosen, gpus = max(nodes, key=cpus), 0
        if gpu_nodes:
            node = max(gpu_nodes, key=cpus)
            facts = probe(node)
            if facts["gpu_steps"]:
                chosen, gpus = node, 1
        facts = probe(chosen) if gpus == 0 else facts
        self._facts[step] = {"node_id": facts["node_id"], "num_cpus": max(1, cpus(chosen)),
                             "num_gpus": gpus, "available": facts["available"]}
        return self._facts[step]

    def whole_node(self, step: str = "index") -> dict[str, int]:
        """Ray resources of one whole-node task of `step`: `num_cpus`, the CPUs of the largest
        alive node offering its resources (never more than one node has, or the task would
        never be scheduled), and `num_gpus`, 1 where a node has a GPU its FAISS can use (asked
        on that node: `node_facts`; then the largest such node's CPUs), else 0."""
        facts = self.node_facts(step)
        return {"num_cpus": facts["num_cpus"], "num_gpus": facts["num_gpus"]}

    def available_memory(self) -> int | None:
        """Bytes free on the node the FAISS index tasks run on (asked there)."""
        return self.node_facts("index")["available"]

    def task_memory_limit(self) -> int | None:
        """The largest memory any alive node offers one task (Ray's `memory` resource): a task
        asking for more would never be placed."""
        return max((int(n.get("Resources", {}).get("memory", 0)) for n in self._alive()),
                   default=0) or None

    def _unplaceable(self, needs: list[dict[str, float]]) -> list[dict[str, float]]:
        """Those of `needs` that no alive node offers every resource of (totals, not what is
        free); the cluster's nodes are asked once, however many needs."""
        alive = self._alive() if needs else []
        return [need for need in needs
                if not any(all(float(n.get("Resources", {}).get(k, 0)) >= v
                               for k, v in need.items() if v > 0) for n in alive)]

    def _watch(self, stage: str, needs: list[dict[str, float]], what: str) -> "Watch":
        return Watch(self, stage, needs, what)

    def _task_options(self, stage: Stage) -> tuple[dict[str, Any], Callable[..., Any]]:
        """The `ray.remote` options of a stage's tasks and the function they run."""
        if stage.whole_node:
            options, run = dict(self.whole_node(stage.name)), _run_whole_node
            log.info("%s tasks ask Ray for %d CPU(s) and %d GPU(s) each", stage.name,
                     options["num_cpus"], options["num_gpus"])
        else:
            options, run = {"num_cpus": 1}, _run_task
        if stage.memory > 0:
            options["memory"] = int(stage.memory)
        if stage.name in self.resources:
            options["resources"] = self.resources[stage.name]
        return {**options, **env_options()}, run

    def imap(self, stage: Stage, tasks: Sequence[Any]) -> Iterator[tuple[int, Any]]:
        if stage.needs_encoder:
            raise InputError(f"stage {stage.name} embeds: use map")
        if not tasks:
            return
        ray = self.ray
        options, run = self._task_options(stage)
        remote = ray.remote(**options, max_retries=self.ray_retries, retry_exceptions=False)(run)
        fn = ray.put(stage.fn)
        refs = [remote.remote(fn, task) for task in tasks]
        where = {ref: i for i, ref in enumerate(refs)}
        weight = stage.weight or (lambda _: 1)
        pending = list(refs)
        try:
            with self._bar(stage, tasks) as bar:
                watch = self._watch(stage.name, [_need(options)], "task")
                while pending:
                    done, pending = self._next_done(pending, watch)
                    for ref in done:
                        i = where.pop(ref)
                        result = self._fetch(ref, stage)
                        bar.update(weight(tasks[i]))
                        yield i, result
        finally:
            for ref in pending:
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)

    def reduce(self, stage: Stage, tasks: Sequence[Any], merge: Stage) -> Any:
        """`Executor.reduce` on the cluster: the tasks' results stay in Ray's object store
        where they are made; as soon as MERGE_FANIN of them are ready (or every task has
        finished) a merge task takes them as its arguments, its result joins the ready ones,
        and so on until one is left, which alone is fetched here. Each task and merge also
        returns a flag that is fetched as it finishes, so a failed one ends the stage at once
        (one error), not when the tree reaches it."""
        if not tasks:
            return None
        ray = self.ray
        options, run = self._task_options(stage)
        merge_options, _ = self._task_options(merge)
        remote = ray.remote(**options, num_returns=2, max_retries=self.ray_retries,
                            retry_exceptions=False)(_flagged)
        merge_remote = ray.remote(**merge_options, num_returns=2, max_retries=self.ray_retries,
                                  retry_exceptions=False)(_flagged)
        fn, merge_fn = ray.put(stage.fn), ray.put(merge.fn)
        weight = stage.weight or (lambda _: 1)
        result_of: dict[Any, Any] = {}
        place: dict[Any, int] = {}
        for i, task in enumerate(tasks):
            flag, result = remote.remote(run, fn, task)
            result_of[flag], place[flag] = result, i
        pending, ready = list(result_of), []
        try:
            with self._bar(stage, tasks) as bar:
                watch = self._watch(stage.name, [_need(options), _need(merge_options)], "task")
                while pending or len(ready) > 1:
                    if len(ready) >= MERGE_FANIN or (len(ready) > 1 and not place):
                        group, ready = ready[:MERGE_FANIN], ready[MERGE_FANIN:]
                        flag, result = merge_remote.remote(_run_merge, merge_fn, *group)
                        result_of[flag] = result
                        pending.append(flag)
                        continue
                    done, pending = self._next_done(pending, watch)
                    for flag in done:
                        self._fetch(flag, stage)  # the task's error, if any; the flag is tiny
                        if flag in place:
                            bar.update(weight(tasks[place.pop(flag)]))
                        ready.append(result_of.pop(flag))
                return self._fetch(ready[0], stage)
        finally:
            for flag in pending:
                with contextlib.suppress(Exception):
                    ray.cancel(flag, force=True)

    def _next_done(self, pending: list[Any], watch: "Watch") -> tuple[list[Any], list[Any]]:
        """(finished, still pending) of `pending` after one wait of at most POLL_SECONDS
        (nothing finished: the stage's stall and lost-node checks, whose error is raised)."""
        done, pending = self.ray.wait(pending, num_returns=1,
                                      timeout=min(POLL_SECONDS, self.ray_timeout))
        if done:
            watch.progressed()
        else:
            stalled = watch.check()
            if stalled is not None:
                raise stalled
        return done, pending

    def _fetch(self, ref: Any, stage: Stage) -> Any:
        try:
            return self.ray.get(ref)
        except Exception as exc:  # noqa: BLE001 - becomes one tapt error
            raise task_error(exc, stage.name) from exc

    def _map_tasks(self, stage: Stage, tasks: Sequence[Any]) -> list[Any]:
        out: list[Any] = [None] * len(tasks)
        for i, result in self.imap(stage, tasks):
            out[i] = result
        return out

    def _map_pool(self, stage: Stage, tasks: Sequence[Any], encoder: EncoderSource
                  ) -> list[Any]:
        """The embed stage as a Ray Data pipeline: tokenise (CPU tasks; each input row a group
        of consecutive parts, `part_groups`, that it fans out to one row per part), the model
        (an autoscaling actor pool, two groups in flight per actor), save (CPU tasks); see
        `tokenize_parts`. A stage function not split into steps (`fn.steps`, as
        `stages.embed_part` is) runs whole in the actors, one part per row."""
        from ray import cloudpickle

        from tapt.indexer.encoding.encoder import tokenizing_of

        ray = self.ray
        size = min(self.pool_size(), len(tasks))
        source = worker_source(encoder)
        steps = getattr(stage.fn, "steps", None)
        # consecutive parts per Ray Data row (see `part_groups`): steps apart only
        group = part_groups(len(tasks)) if steps is not None else 1
        items = ([{"i": i, "task": cloudpickle.dumps(tuple(tasks[i:i + group]))}
                  for i in range(0, len(tasks), group)] if steps is not None else
                 [{"i": i, "task": cloudpickle.dumps(t)} for i, t in enumerate(tasks)])
        memory = {step: amount + (group - 1) * stage.part_memory
                  for step, amount in stage.steps_memory}

        def step_args(step: str, cpus: float = 1.0, gpus: float = 0.0,
                      amount: int | None = None) -> dict[str, Any]:
            amount = memory.get(step, 0) if amount is None else amount
            return {"num_cpus": cpus, **({"num_gpus": gpus} if gpus else {}),
                    **({"memory": int(amount)} if amount > 0 else {}),
                    **self._steer(step), **env_options()}

        def need(args: dict[str, Any]) -> dict[str, float]:
            return {"CPU": float(args["num_cpus"]), "GPU": float(args.get("num_gpus", 0)),
                    "memory": float(args.get("memory", 0)), **args.get("resources", {})}

        model_args = step_args("embed", gpus=self.gpus_per_worker,
                               amount=stage.memory + ACTOR_PARTS_IN_FLIGHT * (group - 1)
                               * stage.part_memory if stage.memory else 0)
        # the pipeline's own actor (`rows_within`) among what the stage waits for
        needs = [need(model_args), {"CPU": 0.0, "GPU": 0.0, "memory": float(PIPELINE_MEMORY)}]
        tokenize_args, save_args = step_args("tokenize"), step_args("save")
        if steps is not None:
            needs += [need(tokenize_args), need(save_args)]
        tokenizing = (cloudpickle.dumps(tokenizing_of(encoder.get())) if steps is not None
                      else None)
        retries, fn = self.ray_retries, stage.fn
        pool = {"min_size": min(self.min_workers, size), "max_size": size,
                "max_tasks_in_flight_per_actor": ACTOR_PARTS_IN_FLIGHT}

        def dataset():
            """The stage's pipeline, made by the actor that runs it (`rows_within`): its
            rows' blocks are put in the object store there, not by the driver (one put per
            row: 0.5 ms of the driver's CPU each, measured)."""
            from ray.data import ActorPoolStrategy

            ds = ray.data.from_items(items, override_num_blocks=len(items))
            if steps is not None:
                ds = ds.map_batches(tokenize_parts, batch_size=1, batch_format="numpy",
                                    fn_kwargs={"steps": steps, "tokenizing": tokenizing,
                                               "key": uuid.uuid4().hex},
                                    max_retries=retries, **tokenize_args)
            ds = ds.map_batches(
                ModelActor, batch_size=1, batch_format="numpy",
                fn_constructor_kwargs={"fn": fn, "source": source},
                compute=ActorPoolStrategy(**pool), max_restarts=retries,
                max_task_retries=retries, **model_args)
            if steps is not None:
                ds = ds.map_batches(save_parts, batch_size=1, batch_format="numpy",
                                    fn_kwargs={"steps": steps}, max_retries=retries,
                                    **save_args)
            return ds

        out: list[Any] = [None] * len(tasks)
        weight = stage.weight or (lambda _: 1)
        with self._bar(stage, tasks) as bar:
            for row in rows_within(ray, dataset, self._watch(stage.name, needs, "part"),
                                   stage.name):
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


# Ray Data rows of the embed stage at most (while a row holds at most MAX_GROUP parts): the
# driver's scheduling costs about 30 ms of CPU a row, so a build of any size is planned in
# about as many rows; memory of a step grows with its row's parts (`Stage.part_memory`).
ROWS = 256
MAX_GROUP = 16


def part_groups(parts: int) -> int:
    """Consecutive parts in one row of the embed pipeline: enough for at most ROWS rows, at
    most MAX_GROUP."""
    return max(1, min(MAX_GROUP, -(-parts // ROWS)))


STEPS = ("scan", "prepare", "tokenize", "embed", "save", "assemble", "train", "index",
         "calibrate", "publish")
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
