"""usable_cores: the affinity, capped by OMP_NUM_THREADS (as Ray sets it for an actor)."""

from __future__ import annotations

import os

import pytest

from tapt.util.machine import usable_cores


@pytest.mark.parametrize("value,expected", [(None, "all"), ("1", 1), ("100000", "all"),
                                            ("0", "all"), ("-2", "all"), ("four", "all"),
                                            (" 1 ", 1)])
def test_usable_cores_follows_omp_num_threads(monkeypatch, value, expected):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    affinity = len(os.sched_getaffinity(0))
    if value is not None:
        monkeypatch.setenv("OMP_NUM_THREADS", value)
    assert usable_cores() == (affinity if expected == "all" else expected)


def test_auto_device_without_a_gpu_driver_imports_no_torch():
    import subprocess
    import sys

    from tapt.indexer.encoding.encoder import _no_gpu_driver

    if not _no_gpu_driver():
        pytest.skip("this machine has a GPU driver")
    code = ("import sys; from tapt.indexer.encoding.encoder import pick_device; "
            "print(pick_device('auto'), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["cpu", "False"]
