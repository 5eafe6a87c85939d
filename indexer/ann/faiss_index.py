"""FAISS index creation, loading and searching over the stored embeddings.

With `ann_recall` (exact ground truth and recall via faiss.contrib) the only indexer modules that
import faiss; `ann_build` builds and calibrates an index from both. Which index to build is
decided in `index_choice`; every search of an approximate index fetches more candidates than
asked and ranks them by exact inner products (`rescore`).

With faiss-gpu installed (`pip install 'tapt[gpu]'`, in place of faiss-cpu) and a GPU visible,
the two steps of a build that grow with the IVF lists x rows run on the GPUs: the k-means
assignments of quantizer training and the coarse assignment of every added row. The indexes
themselves stay CPU indexes (the same files); `TAPT_FAISS_GPU=0` keeps everything on the CPU.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np
from tqdm.auto import tqdm

from tapt.errors import InputError
from tapt.util.files import atomic_write
from tapt.util.ordering import descending_bits, descending_values

from .index_choice import (RESCORE_FACTOR, RESCORE_MIN, IndexChoice, choice_from_manifest,
                           rescore_k)
from ..store.integrity import check_results
from ..store.npy import as_float32
from .rescore import exact_topk
from ..store.text_store import damaged

log = logging.getLogger(__name__)

FLAT_FACTORY = "Flat"
FAISS_FILE = "index.faiss"
FLAT_MARGIN = 100  # an exact search fetches k + this many per part, reranked from the embeddings
_ADD_CHUNK = 65536
_FALLBACK_DEFAULT = {"nprobe": 64, "efSearch": 128}
AGREEMENT = 2e-3  # FAISS vs numpy inner products of the same float32 rows differ by ~1e-6


def new_faiss(choice: IndexChoice, dim: int):
    """An empty FAISS index of the chosen type (untrained where the type needs training)."""
    import faiss

    index = faiss.index_factory(dim, choice.factory, faiss.METRIC_INNER_PRODUCT)
    if choice.kind == "hnsw":
        faiss.downcast_index(index).hnsw.efConstruction = int(
            choice.params.get("efConstruction", 40))
    return index


def faiss_gpu_installed() -> bool:
    """Whether the faiss installed here is faiss-gpu, unless the environment variable
    TAPT_FAISS_GPU=0 keeps FAISS on the CPU (whether a GPU is visible is `faiss_gpus`)."""
    if os.environ.get("TAPT_FAISS_GPU", "1").strip() == "0":
        return False
    import faiss

    return hasattr(faiss, "StandardGpuResources")


@contextmanager
def faiss_threads(threads: int) -> Iterator[None]:
    """Within: FAISS's OpenMP threads set to `threads` (at least 1); put back afterwards."""
    import faiss

    saved = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(max(1, int(threads)))
    try:
        yield
    finally:
        faiss.omp_set_num_threads(saved)


def faiss_gpus() -> int:
    """GPUs FAISS can use in this process: 0 without faiss-gpu, without a visible GPU, or with
    the environment variable TAPT_FAISS_GPU=0."""
    if not faiss_gpu_installed():
        return 0
    import faiss

    try:
        return int(faiss.get_num_gpus())
    except (AttributeError, RuntimeError):
        return 0


@contextmanager
def _gpu_assignment(index, stage: str):
    """Within: an IVF index's k-means training (`stage` "train") or the coarse assignment of
    the rows it adds ("add") runs on every visible GPU (`faiss_gpus`); the index stays a CPU
    index and is left as it was. Yields whether the GPUs are used."""
    import faiss

    try:
        ivf = faiss.extract_index_ivf(index) if faiss_gpus() else None
    except RuntimeError:          # not an IVF index
        ivf = None
    if ivf is None or (stage == "add" and not ivf.is_trained):
        yield False
        return
    cpu_quantizer = ivf.quantizer
    if stage == "train":
        on_gpu = faiss.index_cpu_to_all_gpus(faiss.IndexFlat(ivf.d, cpu_quantizer.metric_type))
        ivf.clustering_index = on_gpu
    else:
        on_gpu = faiss.index_cpu_to_all_gpus(cpu_quantizer)
        ivf.quantizer = on_gpu
    try:
        yield True
    finally:
        if stage == "train":
            ivf.clustering_index = None
        else:
            ivf.quantizer = cpu_quantizer
        del on_gpu


def train_template(embeddings: np.ndarray, choice: IndexChoice) -> tuple[Any, float]:
    """The trained, empty index every shard of an index starts from (one coarse quantizer and
    one set of codebooks for all shards), trained on a seeded sample of rows across the whole
    index; None for types that need no training. Returns it and the seconds spent."""
    index = new_faiss(choice, embeddings.shape[1])
    if index.is_trained:
        return None, 0.0
    import faiss

    t0 = time.perf_counter()
    _train(faiss, index, embeddings, choice)
    return index, time.perf_counter() - t0


def ids_are_global(choice: IndexChoice) -> bool:
    """IVF parts store global row ids (one trained quantizer, parts that could be merged);
    Flat and HNSW parts hold their shard's rows in order (global id = row offset + position)."""
    return choice.kind == "ivfpq"


def build_part(rows: np.ndarray, choice: IndexChoice, template: Any, row_offset: int,
               progress: bool = False):
    """One shard's FAISS part: its rows added (with global ids where the type stores ids) to a
    copy of the trained template, or to a new index."""
    import faiss

    index = faiss.clone_index(template) if template is not None else new_faiss(
        choice, rows.shape[1])
    n = len(rows)
    with _gpu_assignment(index, "add"):
        for start in tqdm(range(0, n, _ADD_CHUNK), desc="faiss add", unit="chunk",
                          disable=not progress or n <= _ADD_CHUNK, leave=False):
            block = np.ascontiguousarray(as_float32(rows[start:start + _ADD_CHUNK]))
            if ids_are_global(choice):
                index.add_with_ids(block, np.arange(row_offset + start, row_offset + start
                                                    + len(block), dtype=np.int64))
            else:
                index.add(block)
    return index


def write_faiss(index, path: Path) -> int:
    """Write a FAISS index atomically (through Python's file object, so a full or read-only
    disk is an OSError -> StorageError; faiss's own writer reports a bare RuntimeError), fsynced;
    returns its size in bytes."""
    import faiss

    with atomic_write(path, "wb") as fh:
        faiss.write_index(index, faiss.PyCallbackIOWriter(fh.write))
    return os.path.getsize(path)


def faiss_section(choice: IndexChoice, ntotal: int, train_seconds: float) -> dict[str, Any]:
    """The top manifest's `faiss` section, before calibration."""
    info: dict[str, Any] = {"factory": choice.factory, "metric": "inner_product",
                            "ntotal": int(ntotal), "file": FAISS_FILE,
                            "part_ids": "global" if ids_are_global(choice) else "local"}
    info.update(choice.manifest())
    info["train"]["seconds"] = round(train_seconds, 2)
    if choice.approximate:
        info["rescore"] = {"factor": RESCORE_FACTOR.get(choice.kind, 1), "min": RESCORE_MIN}
    return info


def _train(faiss, index, embeddings: np.ndarray, choice: IndexChoice) -> None:
    """Train on a seeded random sample of rows (sorted, so the memory map is read in order)."""
    n = len(embeddings)
    size = min(n, choice.train_size or n)
    rng = np.random.default_rng(choice.seed)
    rows = np.sort(rng.choice(n, size=size, replace=False)) if size < n else np.arange(n)
    sample = np.ascontiguousarray(as_float32(embeddings[rows]))
    try:
        ivf = faiss.extract_index_ivf(index)
        ivf.cp.seed = choice.seed
        pq = getattr(faiss.downcast_index(ivf), "pq", None)
        if pq is not None:
            pq.cp.seed = choice.seed
    except RuntimeError:
        pass
    with _gpu_assignment(index, "train") as on_gpu:
        log.info("training %s on %s of %s rows%s", choice.factory, f"{size:,}", f"{n:,}",
                 f" (k-means on {faiss_gpus()} GPU(s))" if on_gpu else "")
        index.train(sample)


def template_of(part) -> Any:
    """The trained, empty template of an IVF part (its quantizer and codebooks, no rows)."""
    import faiss

    template = faiss.clone_index(part)
    template.reset()
    return template


class ShardedFaiss:
    """The FAISS parts of a sharded index searched as one: each part is searched, its ids made
    global, and the per-query results merged best first (ties by ascending id).

    `search_part` and `merge_topk` are the two halves a worker per shard and a driver run."""

    def __init__(self, parts: list[Any], row_offsets: list[int], global_ids: bool) -> None:
        self.parts = parts
        self.row_offsets = [int(o) for o in row_offsets]
        self.global_ids = global_ids
        self.ntotal = int(sum(p.ntotal for p in parts))
        self.d = int(parts[0].d) if parts else 0
        self.metric_type = parts[0].metric_type if parts else None
        self._shared: bool | None = None

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        bases = [0 if self.global_ids else off for off in self.row_offsets]
        q = np.ascontiguousarray(queries, dtype=np.float32)
        assigned = None
        if len(self.parts) > 1 and self.shares_quantizer():
            # one coarse assignment for every part (they were trained as one index)
            coarse_sims, lists = self.parts[0].quantizer.search(q, int(self.parts[0].nprobe))
            assigned = (lists, coarse_sims)
        return merge_in_groups((search_part(p, q, k, base, assigned)
                                for p, base in zip(self.parts, bases)), k)

    def shares_quantizer(self) -> bool:
        """Whether every part is a plain IVF index over the same coarse centroids (what a
        sharded build trains), so one assignment of the queries serves them all."""
        if self._shared is None:
            self._shared = _same_ivf_quantizer(self.parts)
        return self._shared

    def set_param(self, name: str, value: int) -> None:
        for part in self.parts:
            set_search_param(part, name, value)



class PartByPart(ShardedFaiss):
    """The FAISS parts of a sharded index searched one at a time: each part is loaded (by
    `load`, with its checks), searched and released before the next, its results merged as
    they come (`merge_in_groups`), so a search holds one part, not every part (`ShardedFaiss`
    holds them all: the whole index's codes and graphs in the driver). The same results as
    `ShardedFaiss` of the same parts: parts that share one IVF quantizer (what a sharded build
    trains) are searched with one coarse assignment of the queries, as there.

    Args:
        load: The checked FAISS part of shard i (`Index.faiss_part`).
        row_offsets: Each shard's first global row.
        global_ids: Whether the parts store global row ids.
    """

    def __init__(self, load, row_offsets: list[int], global_ids: bool) -> None:
        super().__init__([], row_offsets, global_ids)
        self._load = load
        self._params: dict[str, int] = {}

    def set_param(self, name: str, value: int) -> None:
        self._params[name] = int(value)

    def _part(self, i: int):
        part = self._load(i)
        for name, value in self._params.items():
            set_search_param(part, name, value)
        return part

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        bases = [0 if self.global_ids else off for off in self.row_offsets]
        q = np.ascontiguousarray(queries, dtype=np.float32)
        held = [self._part(0)]                 # the first part, until it is searched
        if len(bases) == 1:
            return merge_in_groups([search_part(held.pop(), q, k, bases[0])], k)
        first = held[0]
        assigned = None
        if _same_ivf_quantizer([first]):
            shape = (first.nlist, first.nprobe, first.d, first.metric_type)
            centroids = _centroid_digest(first)
            coarse_sims, lists = first.quantizer.search(q, int(first.nprobe))
            assigned = (lists, coarse_sims)
        del first

        def shared(part) -> bool:
            """Whether `part` is an IVF part over the first part's coarse centroids."""
            try:
                return (_same_ivf_quantizer([part])
                        and (part.nlist, part.nprobe, part.d, part.metric_type) == shape
                        and _centroid_digest(part) == centroids)
            except RuntimeError:
                return False

        def results(assigned):
            for i, base in enumerate(bases):
                part = held.pop() if held else self._part(i)
                if assigned is not None and not shared(part):
                    raise _NotShared
                yield search_part(part, q, k, base, assigned)
                del part

        try:
            return merge_in_groups(results(assigned), k)
        except _NotShared:      # the parts do not share one quantizer: each assigns its own
            held.clear()
            return merge_in_groups(results(None), k)


class _NotShared(Exception):
    """A part of `PartByPart` does not share the first part's IVF quantizer."""

def _centroid_digest(part, block: int = 1024) -> bytes:
    """A digest of an IVF part's coarse centroids, read `block` lists at a time: parts are
    compared without a copy of every centroid held (12.6 MB at 8,192 lists of 384 dims)."""
    digest = hashlib.blake2b(digest_size=32)
    for lo in range(0, part.nlist, block):
        digest.update(np.ascontiguousarray(
            part.quantizer.reconstruct_n(lo, min(block, part.nlist - lo))).tobytes())
    return digest.digest()


def _same_ivf_quantizer(parts: list[Any]) -> bool:
    import faiss

    if not parts or not all(isinstance(p, faiss.IndexIVF) for p in parts):
        return False
    first = parts[0]
    if any(p.nlist != first.nlist or p.nprobe != first.nprobe or p.d != first.d
           or p.metric_type != first.metric_type for p in parts):
        return False
    try:
        centroids = _centroid_digest(first)      # raises for a quantizer that cannot give them
        return all(_centroid_digest(p) == centroids for p in parts[1:])
    except RuntimeError:  # a quantizer that cannot give its centroids back
        return False


def search_part(part, queries: np.ndarray, k: int, id_base: int = 0,
                assigned: tuple[np.ndarray, np.ndarray] | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    """One part's top min(k, its rows) per query, with global ids (-1 for none).

    `assigned`: (lists, similarities) of each query's `nprobe` nearest coarse centroids, for an
    IVF part whose quantizer they came from (searched without assigning again)."""
    q = np.ascontiguousarray(queries, dtype=np.float32)
    width = min(int(k), int(part.ntotal))
    if width <= 0:
        return (np.full((len(q), 0), -np.inf, dtype=np.float32),
                np.full((len(q), 0), -1, dtype=np.int64))
    if assigned is not None:
        sims, ids = part.search_preassigned(q, width, assigned[0], assigned[1])
    else:
        sims, ids = part.search(q, width)
    if id_base:
        ids = np.where(ids >= 0, ids + id_base, ids)
    return sims, ids


MERGE_GROUP = 16   # parts' results merged at a time: memory bounded whatever the shard count


def merge_in_groups(results: Iterable[tuple[np.ndarray, np.ndarray]], k: int,
                    group: int = MERGE_GROUP) -> tuple[np.ndarray, np.ndarray]:
    """`merge_topk` of results that arrive one part at a time, `group` parts merged at once:
    the same answer (the best k of a union are among the best k of its groups), holding
    `group` x k results per query instead of one per part's result."""
    pending: list[tuple[np.ndarray, np.ndarray]] = []
    for result in results:
        pending.append(result)
        if len(pending) >= group:
            pending = [merge_topk(pending, k)]
    if not pending:
        raise ValueError("merge_in_groups needs at least one part's results")
    return merge_topk(pending, k)


def merge_topk(results: list[tuple[np.ndarray, np.ndarray]], k: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """The best `k` per query of several parts' results, best first, ties by ascending id
    (-inf / -1 where a query has fewer than `k`).

    Each result is one 64-bit key, the similarity's order-preserving bits above the id's
    offset from the smallest id: the keys are partitioned in place and the best `k` sorted
    (the two-key sort of every part's results was most of a 10-shard search). NaN, float64
    similarities and ids spread over 2^32 or more take the two-key sort."""
    if not results:
        raise ValueError("merge_topk needs at least one part's results")
    n = len(results[0][1])
    widths = [r[1].shape[1] for r in results]
    width = sum(widths)
    k = max(0, min(int(k), width))
    top_id = np.iinfo(np.int64).max
    lowest = min((int(np.min(r[1], initial=top_id, where=r[1] >= 0)) for r in results),
                 default=top_id)
    lowest = 0 if lowest == top_id else lowest
    highest = max((int(np.max(r[1], initial=0)) for r in results), default=0)
    if (width == 0 or n == 0 or highest - lowest >= 0xFFFFFFFF
            or any(r[0].dtype != np.float32 or np.isnan(r[0]).any() for r in results)):
        return _merge_lexsort(results, k)
    none = np.uint64(0xFFFFFFFFFFFFFFFF)     # after every real key: no id
    key = np.empty((n, width), dtype=np.uint64)
    start = 0
    for sims, ids in results:
        block = key[:, start:start + ids.shape[1]]
        block[:] = descending_bits(sims)
        block <<= np.uint64(32)
        block |= (ids - lowest).astype(np.uint64) & np.uint64(0xFFFFFFFF)
        block[ids < 0] = none
        start += ids.shape[1]
    if k < width:
        key.partition(max(k - 1, 0), axis=1)
    top = np.sort(key[:, :k], axis=1)
    missing = top == none
    ids = (top & np.uint64(0xFFFFFFFF)).astype(np.int64) + lowest
    ids[missing] = -1
    sims = descending_values((top >> np.uint64(32)).astype(np.uint32))
    sims[missing] = -np.inf
    return sims, ids


def _merge_lexsort(results: list[tuple[np.ndarray, np.ndarray]], k: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """`merge_topk` by a partition and a two-key sort (any dtype, NaN last, any ties)."""
    if len(results) == 1 and results[0][1].shape[1] <= k:
        sims, ids = results[0]
    else:
        sims = np.concatenate([r[0] for r in results], axis=1)
        ids = np.concatenate([r[1] for r in results], axis=1)
    valid = ids >= 0
    id_key = np.where(valid, ids, np.iinfo(np.int64).max)
    neg = -np.where(valid, sims, -np.inf)
    if 0 < k < sims.shape[1]:
        # Only the best k per query are sorted: those strictly better than the k-th best
        # similarity, and of the ones equal to it the lowest ids.
        kth = np.partition(neg, k - 1, axis=1)[:, k - 1:k]
        pick = np.where(neg < kth, -1, np.where(neg == kth, id_key, np.iinfo(np.int64).max))
        chosen = np.argpartition(pick, k - 1, axis=1)[:, :k]
        id_key = np.take_along_axis(id_key, chosen, axis=1)
        neg = np.take_along_axis(neg, chosen, axis=1)
        sims = np.take_along_axis(sims, chosen, axis=1)
        ids = np.take_along_axis(ids, chosen, axis=1)
    order = np.lexsort((id_key, neg), axis=-1)[:, :k]
    ids = np.take_along_axis(ids, order, axis=1)
    sims = np.where(ids >= 0, np.take_along_axis(sims, order, axis=1), -np.inf)
    return sims, ids


def read_faiss_index(path: Path):
    """Load an index written by `ann_build.build_faiss_index`, memory-mapped where the type allows it."""
    import faiss

    try:
        return faiss.read_index(str(path), faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY)
    except RuntimeError:
        return faiss.read_index(str(path))


def set_search_param(index, name: str, value: int) -> None:
    """Set `nprobe` (IVF) or `efSearch` (HNSW) on an index (every part of a sharded one),
    through any wrapping transform."""
    import faiss

    if isinstance(index, ShardedFaiss):
        index.set_param(name, value)
        return
    faiss.ParameterSpace().set_index_parameter(index, name, int(value))


def search_setting(faiss_info: dict[str, Any], n: int, dim: int, nprobe: int | None = None,
                   ef_search: int | None = None) -> tuple[str, str | None, int | None]:
    """(kind, parameter name, value) for a search: the given value, else the recorded default."""
    choice = choice_from_manifest(faiss_info, n, dim)
    for param, value, name in (("nprobe", nprobe, "nprobe"), ("ef_search", ef_search,
                                                               "efSearch")):
        if value is None:
            continue
        if value < 1:
            raise InputError("must be at least 1", param=param)
        if choice.search_param != name:
            kind = "exact" if choice.kind == "flat" else choice.kind
            hint = {"nprobe": "use `nprobe`", "efSearch": "use `ef_search`"}.get(
                choice.search_param or "", "it needs no search parameter")
            raise InputError(f"does not apply to this index's FAISS index {choice.factory} "
                             f"({kind}): {hint}", param=param)
        return choice.kind, name, int(value)
    if choice.search_param is None:
        return choice.kind, None, None
    recorded = (faiss_info.get("search") or {}).get("default")
    return choice.kind, choice.search_param, int(recorded or _FALLBACK_DEFAULT[choice.search_param])


def knn_search(index, embeddings: np.ndarray, queries: np.ndarray, k: int,
               faiss_info: dict[str, Any], nprobe: int | None = None,
               ef_search: int | None = None, label: str | Path | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
    """The exact top-`k` rows per query by inner product: an exact index answers directly; an
    approximate one fetches `rescore_k` candidates that are rescored from `embeddings`.

    Every row FAISS returns is checked against the stored embeddings (an exact index's
    similarities must equal the rows' inner products; candidates must exist), so a damaged
    `index.faiss` or `embeddings.npy` that reaches an answer fails as IndexFormatError."""
    n, dim = embeddings.shape
    k = min(int(k), n)
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    kind, name, value = search_setting(faiss_info, n, dim, nprobe, ef_search)
    if kind == "flat":
        # A few more than k, ranked by the stored embeddings: BLAS rounds a row's similarity
        # by the block it was computed in, so near-ties at the cut fall the same way however
        # the rows are sharded.
        sims, ids = index.search(queries, min(n, k + FLAT_MARGIN))
        check_results(sims, ids, n, label)
        stored = np.empty(ids.shape, dtype=np.float32)
        top = exact_topk(embeddings, queries, ids, k, label=label, candidate_sims=stored)
        off = (ids >= 0) & ~(np.abs(stored - sims) <= AGREEMENT)     # NaN disagrees too
        if off.any():
            q, j = np.argwhere(off)[0]
            raise damaged(label, f"index.faiss and embeddings.npy disagree (query {int(q)}, "
                                 f"similarity {float(sims[q, j]):.4f} vs {float(stored[q, j]):.4f})")
        return top
    set_search_param(index, name, value)
    factor = (faiss_info.get("rescore") or {}).get("factor")
    sims, candidates = index.search(queries, rescore_k(k, kind, n, factor))
    check_results(sims, candidates, n, label)
    return exact_topk(embeddings, queries, candidates, k, label=label)
