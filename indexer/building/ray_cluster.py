"""Ray connections and what every tapt task and actor on Ray shares: joining or starting a
cluster (`connect`), the error a failed task becomes (`task_error`), the settings that travel with
every task (`worker_env`), what a node offers whole-node work (`node_facts`, run there), and how
a waiting stage decides it has stalled (`Watch`). Used by the Ray executor of a build and by the
serving actors; Ray is imported on use only."""

from __future__ import annotations

import logging
import os
import re
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from tapt.errors import InputError, TaptError
from tapt.util.checks import real_number

log = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'tapt[ray]'"
DEFAULT_TIMEOUT = 3600.0
DEFAULT_RETRIES = 3
# How often a waiting stage wakes to check that its work can still be placed (a wait ends
# at once when a task finishes): each wake costs the driver a Ray call and a node listing,
# about 0.5 ms of CPU, which over a long stage followed its wall time.
POLL_SECONDS = 10.0
LOST_AFTER = 10.0       # seconds no alive node can run a step before its stage ends
ENV_PREFIXES = ("TAPT_", "HF_")
ENV_KEPT_BACK = ("HF_TOKEN",)   # a secret: never into Ray's records of a task (its dashboard)


@dataclass(frozen=True)
class RayOptions:
    """The Ray executor's options (`RayExecutor.Options`): keywords of `Index.build` and
    `Index.add`, and flags of `tapt index build` and `index add` (`-` for `_`), applying with
    `executor` ray only; None keeps `RayExecutor`'s own default."""

    ray_address: str | None = field(default=None, metadata={
        "help": "--executor ray: the cluster to join [default: RAY_ADDRESS, else a local "
                "cluster on this machine].", "metavar": "auto|HOST:PORT"})
    ray_workers: int | None = field(default=None, metadata={
        "help": "--executor ray: embedding actors [default: GPUs / --gpus-per-worker, or the "
                "cluster's CPUs - 1].", "minimum": 1})
    gpus_per_worker: float | None = field(default=None, metadata={
        "help": "--executor ray: GPUs per embedding actor (0.5: two per GPU) [default: 0, CPU "
                "actors].", "minimum": 0})
    ray_timeout: float | None = field(default=None, metadata={
        "help": "--executor ray: fail a stage when no task of it finishes for this long (the "
                "cluster lost its workers, or cannot place them) "
                f"[default: {DEFAULT_TIMEOUT:g}].", "minimum": 0, "min_open": True,
        "metavar": "SECONDS"})
    ray_retries: int | None = field(default=None, metadata={
        "help": "--executor ray: restarts of a dead embedding actor and retries of a task "
                f"whose worker died [default: {DEFAULT_RETRIES}].", "minimum": 0})


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


def worker_env() -> dict[str, Any]:
    """The `runtime_env` of every tapt task and actor: this process's tapt and Hugging Face
    settings (`TAPT_*`, `HF_*` environment variables, but `HF_TOKEN`, a secret that Ray would
    record with every task: give workers their token through the cluster's own environment),
    merged by Ray into the job's own runtime environment. Empty where none is set."""
    env = {k: v for k, v in os.environ.items()
           if k.startswith(ENV_PREFIXES) and k not in ENV_KEPT_BACK}
    return {"env_vars": env} if env else {}


def env_options() -> dict[str, Any]:
    """`ray.remote` options that send `worker_env` (none when it is empty)."""
    env = worker_env()
    return {"runtime_env": env} if env else {}


def node_facts() -> dict[str, Any]:
    """What the node this runs on offers tapt's whole-node work (a probe task's answer):
    `available`, the bytes it may still allocate (`util.machine.available_memory`, None where
    unknown), `gpu_steps`, whether an IVF build's k-means and coarse assignment may use a GPU
    there (through torch, or faiss-gpu where installed; `faiss_index.gpu_steps_allowed`, with
    this job's TAPT_FAISS_GPU), and `node_id`, the node it ran on."""
    import ray

    from tapt.indexer.ann.faiss_index import gpu_steps_allowed
    from tapt.util.machine import available_memory

    return {"available": available_memory(), "gpu_steps": bool(gpu_steps_allowed()),
            "node_id": ray.get_runtime_context().get_node_id()}


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
                            param="ray_address") from None


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
        _refuse_another_cluster(ray, address)
        return False
    _probe(address or os.environ.get("RAY_ADDRESS") or "")
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=not quiet,
                 logging_level=logging.WARNING, configure_logging=True)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = address or os.environ.get("RAY_ADDRESS") or "a new local cluster"
        raise ExecutorError(f"cannot connect to the Ray cluster at {where} ({_first_line(exc)});"
                            " start one with `ray start --head` or check the address",
                            param="ray_address") from exc
    return True


def custom_resources(resources: Any) -> dict[str, float]:
    """`resources` checked: None, or a dict of Ray resource names to positive finite amounts."""
    if resources is None:
        return {}
    if not isinstance(resources, dict) or not all(isinstance(k, str) and k
                                                  for k in resources):
        raise InputError("must be a dict of Ray resource names to amounts, e.g. "
                         "{\"index-node\": 1}", param="resources")
    return {k: real_number(v, f"resources.{k}", low=0, low_open=True, what="more than 0")
            for k, v in resources.items()}


def check_placeable(ray, count: int, cpus: float, resources: dict[str, float]) -> None:
    """Refuse `count` actors of `cpus` CPUs and `resources` each that the connected cluster
    cannot hold (an actor that cannot be placed waits forever).

    Raises:
        InputError: the cluster offers too few CPUs, or too little of a custom resource.
    """
    total = ray.cluster_resources()
    have = float(total.get("CPU", 0))
    if count * cpus > have + 1e-9:
        raise InputError(f"{count} actor(s) of {cpus:g} CPU need {count * cpus:g} CPUs, the Ray "
                         f"cluster has {have:g} (an actor that cannot be placed waits forever): "
                         "pass fewer `actors` or a smaller `cpus_per_actor`", param="actors")
    for name, amount in resources.items():
        offered = float(total.get(name, 0))
        if count * amount > offered + 1e-9:
            raise InputError(f"{count} actor(s) need {count * amount:g} of the resource "
                             f"{name!r}, the Ray cluster offers {offered:g} (an actor that "
                             "cannot be placed waits forever): start its nodes with "
                             f"--resources '{{\"{name}\": N}}', or ask for less",
                             param="resources")


def _refuse_another_cluster(ray, address: str | None) -> None:
    """An `address` naming another cluster than the one this process is connected to is
    refused: it would be ignored (a process is connected to one cluster at a time)."""
    if address is None or address == "auto":
        return
    connected = ray.get_runtime_context().gcs_address or ""
    if not _same_address(address, connected):
        raise ExecutorError(f"this process is connected to the Ray cluster at {connected} "
                            f"already; {address} names another: disconnect first "
                            "(ray.shutdown()), or leave `ray_address` out to use the connected "
                            "one", param="ray_address")


def _same_address(address: str, connected: str) -> bool:
    """Whether HOST:PORT names the cluster whose GCS is at `connected` (HOST:PORT): the same
    port, and a host that resolves to the same address or to this machine on both sides."""
    if address.startswith("ray://"):
        return True                     # a client connection: Ray itself tells them apart
    host, _, port = address.rpartition(":")
    chost, _, cport = connected.rpartition(":")
    if port != cport:
        return False

    def addresses(name: str) -> set[str]:
        try:
            return {info[4][0] for info in socket.getaddrinfo(name.strip("[]"), None)}
        except OSError:
            return {name}

    mine = addresses(socket.gethostname()) | {"127.0.0.1", "::1"}
    theirs, ours = addresses(host), addresses(chost)
    return bool(theirs & ours) or bool(theirs & mine and ours & mine)


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



class Watch:
    """What a waiting stage checks whenever nothing finished for a while (`check`): the error
    that ends it (nothing finished for the executor's `timeout` since the last progress; or some
    of its work, needing one of `needs`, has had no alive node to run on for `LOST_AFTER` s),
    else None (wait on)."""

    def __init__(self, executor: Any, stage: str, needs: list[dict[str, float]],
                 what: str) -> None:
        self.executor, self.stage, self.needs, self.what = executor, stage, needs, what
        self.progressed()

    def progressed(self) -> None:
        self.since, self.lost = time.monotonic(), None

    def check(self) -> BaseException | None:
        now = time.monotonic()
        if now - self.since >= self.executor.ray_timeout:
            return ExecutorError(f"no {self.stage} {self.what} finished in "
                                 f"{self.executor.ray_timeout:g} s on the Ray cluster; the finished "
                                 "ones are kept: run the same command again to resume")
        missing = self.executor._unplaceable(self.needs)
        if not missing:
            self.lost = None
            return None
        self.lost = self.lost if self.lost is not None else now
        if now - self.lost < LOST_AFTER:
            return None
        asks = ", ".join(f"{k} {v:g}" for k, v in sorted(missing[0].items()) if v > 0)
        return ExecutorError(f"no alive node of the Ray cluster can run the {self.stage} "
                             f"stage's work any more (it needs {asks}: a node was lost?); the "
                             "finished parts are kept: run the same command again to resume")


