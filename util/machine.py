"""What this process may use of the machine it runs on."""

from __future__ import annotations

import os

__all__ = ["usable_cores", "available_memory", "MEMORY_SHARE", "torch_single_threaded"]

MEMORY_SHARE = 0.5   # of the available memory: the default RAM budget of a FAISS index
_MEMINFO = "/proc/meminfo"
_CGROUP = "/sys/fs/cgroup"


def usable_cores() -> int:
    """Cores this process may use: its CPU affinity (cgroup-aware where the OS tells), capped
    by `OMP_NUM_THREADS` where that is set to a positive number: the convention torch and BLAS
    follow, and what Ray sets to the CPUs it gives an actor, so tapt's own threads (tokenising,
    ONNX Runtime, scans) stay within the same share.

    Returns:
        At least 1.
    """
    try:
        cores = max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        cores = max(1, os.cpu_count() or 1)
    try:
        limit = int(os.environ.get("OMP_NUM_THREADS", "").strip() or 0)
    except ValueError:
        limit = 0
    return min(cores, limit) if limit > 0 else cores


def _read_int(path: str) -> int | None:
    """The whole number a one-line kernel file holds; None where it is absent, unreadable or
    says `max` (no limit)."""
    try:
        with open(path, encoding="ascii") as fh:
            text = fh.read().strip()
    except (OSError, ValueError):
        return None
    return int(text) if text.isdigit() else None


def _meminfo_available(path: str = _MEMINFO) -> int | None:
    """`MemAvailable` of /proc/meminfo in bytes (the kernel's estimate of what can be allocated
    without swapping), None where it is not known."""
    try:
        with open(path, encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_room(root: str = _CGROUP) -> int | None:
    """What the cgroup this process lives in still lets it allocate (limit - usage), for cgroup
    v2 (`memory.max`, `memory.current`) and v1 (`memory/memory.limit_in_bytes`,
    `memory.usage_in_bytes`); None where no limit is set or readable."""
    for limit_file, usage_file in (("memory.max", "memory.current"),
                                   ("memory/memory.limit_in_bytes",
                                    "memory/memory.usage_in_bytes")):
        limit = _read_int(os.path.join(root, limit_file))
        if limit is None or limit >= 1 << 60:     # v1 writes "no limit" as a huge number
            continue
        usage = _read_int(os.path.join(root, usage_file)) or 0
        return max(0, limit - usage)
    return None


def available_memory() -> int | None:
    """Bytes this process may still allocate: the smaller of the kernel's `MemAvailable` and the
    room its cgroup's memory limit leaves (containers, Slurm, Kubernetes).

    Returns:
        Bytes, or None where neither is known (not Linux).
    """
    known = [v for v in (_meminfo_available(), _cgroup_room()) if v is not None]
    return min(known) if known else None


def torch_single_threaded() -> None:
    """In a process just forked: torch, if the parent had imported it, runs one thread. GNU
    OpenMP's thread pool does not survive a fork: the first parallel region a child runs waits
    forever for threads that exist only in the parent (a `select` in a worker forked after the
    parent selected hung so). `import tapt` registers this with `os.register_at_fork`."""
    import sys

    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)
