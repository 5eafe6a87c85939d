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
