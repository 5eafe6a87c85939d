"""What this process may use of the machine it runs on."""

from __future__ import annotations

import os

__all__ = ["usable_cores"]


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
