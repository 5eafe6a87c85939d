"""Test encoders for the Ray executor, and a child build driver to kill.

Run as `python ray_worker.py ADDRESS CORPUS[,CORPUS...] OUT LOG` it is the child: a driver that
joins the Ray cluster at ADDRESS and builds a 3-shard index of CORPUS with a slow hashing
encoder whose actors append the size of every part they embed to LOG.

Ray workers cannot import the tests' modules, so `ship_by_value` makes Ray pickle these
encoders (and conftest's) by value.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/: conftest
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # the repository

import conftest  # noqa: E402
from conftest import HashingEncoder  # noqa: E402
from tapt.errors import InputError  # noqa: E402

WORKER = Path(__file__).resolve()
CONFIG = dict(segment_size=4, split=False, progress=False, part_size=16, batch_size=16, shards=3)


def ship_by_value() -> None:
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(conftest)
    cloudpickle.register_pickle_by_value(sys.modules[__name__])


class LoggingEncoder(HashingEncoder):
    """Sleeps `delay` s per part and appends each part's size to `log`."""

    def __init__(self, log: str, delay: float = 0.0) -> None:
        super().__init__()
        self.log, self.delay = log, delay

    def encode(self, texts, batch_size: int = 64):
        time.sleep(self.delay)
        out = super().encode(texts, batch_size)
        with open(self.log, "a", encoding="utf-8") as fh:
            fh.write(f"{len(texts)}\n")
        return out


class CrashingEncoder(HashingEncoder):
    """Kills its worker process (os._exit) in `encode`: once (the first call anywhere creates
    `marker`, later calls embed), or on every call when `always`."""

    def __init__(self, marker: str, always: bool = False) -> None:
        super().__init__()
        self.marker, self.always = marker, always

    def encode(self, texts, batch_size: int = 64):
        if self.always or not os.path.exists(self.marker):
            Path(self.marker).touch()
            os._exit(3)
        return super().encode(texts, batch_size)


def with_faiss_threads(fn, task):
    """`fn(task)` and the FAISS OpenMP threads it ran with (wraps a stage's function)."""
    import faiss

    return fn(task), faiss.omp_get_max_threads()


def main(address: str, corpus: str, out: str, log: str) -> None:
    from tapt.indexer.building.executors.ray_executor import RayExecutor
    from tapt.indexer.building.pipeline import BuildConfig, build_index

    runner = RayExecutor(ray_address=address, progress=False)
    ship_by_value()
    try:
        build_index(corpus.split(","), out, LoggingEncoder(log, delay=0.3),
                    BuildConfig(**CONFIG, executor="ray"), executor=runner)
    finally:
        runner.close()


if __name__ == "__main__":
    main(*sys.argv[1:5])


def pid_source(log: str, blocks: int, rows: int):
    """A Ray Data datasource of `blocks` blocks of `rows` rows (column `i`: 0, 1, ...) that
    appends the pid of every process that plans reading it to `log` (Ray Data plans a read
    where its executor runs)."""
    import pyarrow as pa
    from ray.data import Datasource, ReadTask
    from ray.data.block import BlockMetadata

    class PidSource(Datasource):
        def estimate_inmemory_data_size(self):
            return None

        def get_read_tasks(self, parallelism, **_):
            with open(log, "a") as f:
                f.write(f"{os.getpid()}\n")
            meta = BlockMetadata(num_rows=rows, size_bytes=None, input_files=None,
                                 exec_stats=None)
            return [ReadTask(lambda b=b: [pa.table({"i": list(range(b * rows, (b + 1) * rows))})],
                             meta) for b in range(blocks)]

    return PidSource()


def square_where(i: int, slow: float = 0.0) -> tuple[int, frozenset[int], int]:
    """A reduce's task: (i squared, {this process's pid}, 0 merges yet); 13 fails at once,
    the others first sleep `slow` seconds."""
    if i == 13:
        raise InputError("task 13 is bad", param="corpus")
    time.sleep(slow)
    return i * i, frozenset([os.getpid()]), 0


def add_where(parts: list[tuple[int, frozenset[int], int]]) -> tuple[int, frozenset[int], int]:
    """A reduce's merge: the sum, every pid that made a part or merged it, the most parts one
    merge was given."""
    return (sum(p[0] for p in parts), frozenset().union(*(p[1] for p in parts),
                                                       [os.getpid()]),
            max([len(parts)] + [p[2] for p in parts]))
