"""FAISS index creation, loading and searching over the stored embeddings.

With `ann_recall` (exact ground truth and recall via faiss.contrib) the only indexer modules that
import faiss; `ann_build` builds and calibrates an index from both. Which index to build is
decided in `index_choice`; every search of an approximate index fetches more candidates than
asked and ranks them by exact inner products (`rescore`).

Where a GPU is visible, the two steps of a build that grow with the IVF lists x rows run on it:
the k-means of quantizer training and the coarse assignment of every added row. With faiss-cpu
(the default) they run through torch (`coarse`); with faiss-gpu installed in its place, on
FAISS's own GPU indexes. The indexes themselves stay CPU indexes (the same files);
`TAPT_FAISS_GPU=0` keeps everything on the CPU.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import numpy as np
from tqdm.auto import tqdm

from tapt.errors import IndexFormatError, InputError
from tapt.indexer.ann import coarse
from tapt.indexer.ann.index_choice import (
    RESCORE_FACTOR,
    RESCORE_MIN,
    IndexChoice,
    choice_from_manifest,
    rescore_k,
)
from tapt.indexer.ann.rescore import exact_topk
from tapt.indexer.ann.topk_merge import merge_in_groups
from tapt.indexer.store.integrity import check_faiss_index, check_results
from tapt.indexer.store.npy import as_float32
from tapt.indexer.store.text_store import damaged
from tapt.util.files import atomic_write

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
    coarse.configure(index, choice.params)
    return index


def shares_quantizer(choice: IndexChoice) -> bool:
    """Whether the index stores its IVF coarse quantizer once (`QUANTIZER`), its parts without
    one (indexes built before keep one in every part)."""
    return choice.kind == "ivfpq" and bool(choice.params.get("shared_quantizer"))


def gpu_steps_allowed() -> bool:
    """Whether an IVF build's k-means and coarse assignment may use a GPU it is given (through
    torch, or faiss-gpu where installed): unless the environment variable TAPT_FAISS_GPU=0."""
    return os.environ.get("TAPT_FAISS_GPU", "1").strip() != "0"


def faiss_gpu_installed() -> bool:
    """Whether the faiss installed here is faiss-gpu, unless the environment variable
    TAPT_FAISS_GPU=0 keeps FAISS on the CPU (whether a GPU is visible is `faiss_gpus`)."""
    if not gpu_steps_allowed():
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
    else:       # every centroid compared on the GPUs (an HNSW graph has no GPU version)
        flat = faiss.IndexFlat(ivf.d, cpu_quantizer.metric_type)
        flat.add(coarse.centroids(cpu_quantizer))
        on_gpu = faiss.index_cpu_to_all_gpus(flat)
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
    coarse.configure(index, choice.params)
    n = len(rows)
    device = coarse.torch_device() if index.is_trained and coarse.torch_handles(index) else None
    adder = coarse.TorchAdder(index, device) if device else None
    with _gpu_assignment(index, "add"):
        for start in tqdm(range(0, n, _ADD_CHUNK), desc="faiss add", unit="chunk",
                          disable=not progress or n <= _ADD_CHUNK, leave=False):
            block = np.ascontiguousarray(as_float32(rows[start:start + _ADD_CHUNK]))
            ids = np.arange(row_offset + start, row_offset + start + len(block),
                            dtype=np.int64)
            if adder is not None:
                adder.add(block, ids)
            elif ids_are_global(choice):
                index.add_with_ids(block, ids)
            else:
                index.add(block)
    return adder.result() if adder is not None else index


def write_faiss(index, path: Path, without_quantizer: bool = False) -> int:
    """Write a FAISS index atomically (through Python's file object, so a full or read-only
    disk is an OSError -> StorageError; faiss's own writer reports a bare RuntimeError), fsynced;
    returns its size in bytes. `without_quantizer`: an IVF part of an index that stores its
    quantizer once, written with an empty stand-in (`coarse.detached`)."""
    import faiss

    with atomic_write(path, "wb") as fh, (coarse.detached(index) if without_quantizer
                                          else contextlib.nullcontext()):
        faiss.write_index(index, faiss.PyCallbackIOWriter(fh.write))
    return os.path.getsize(path)


def write_quantizer(template, path: Path) -> int:
    """Write the coarse quantizer of a trained IVF template (what every part shares) to `path`;
    returns its size in bytes."""
    return write_faiss(coarse.quantizer_of(template), path)


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
    device = coarse.torch_device() if coarse.torch_handles(index) else None
    if device:
        log.info("training %s on %s of %s rows (k-means through torch on %s)", choice.factory,
                 f"{size:,}", f"{n:,}", device)
        coarse.train_on_torch(index, sample, device, choice.seed)
        return
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
            # the index's one quantizer, where it stores one (kept alive by the index), else
            # a digest of the first part's own, which is released with the part
            one = coarse.attached(first)
            centroids = _centroid_digest(first.quantizer) if one is None else None
            coarse_sims, lists = first.quantizer.search(q, int(first.nprobe))
            assigned = (lists, coarse_sims)
        del first

        def shared(part) -> bool:
            """Whether `part` is an IVF part over the first part's coarse centroids."""
            try:
                return (_same_ivf_quantizer([part])
                        and (part.nlist, part.nprobe, part.d, part.metric_type) == shape
                        and (one is not None and _quantizer_address(part) == int(one.this)
                             or _centroid_digest(part.quantizer)
                             == (centroids or _centroid_digest(one))))
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

def _centroid_digest(quantizer, block: int = 1024) -> bytes:
    """A digest of an IVF part's coarse centroids, read `block` lists at a time: parts are
    compared without a copy of every centroid held (12.6 MB at 8,192 lists of 384 dims)."""
    digest = hashlib.blake2b(digest_size=32)
    for lo in range(0, quantizer.ntotal, block):
        digest.update(np.ascontiguousarray(
            quantizer.reconstruct_n(lo, min(block, quantizer.ntotal - lo))).tobytes())
    return digest.digest()


def _quantizer_address(part) -> int:
    """Where an IVF part's quantizer lives in memory: parts given the index's one shared
    quantizer (`coarse.attach`) have the same."""
    return int(part.quantizer.this)


def _same_ivf_quantizer(parts: list[Any]) -> bool:
    import faiss

    if not parts or not all(isinstance(p, faiss.IndexIVF) for p in parts):
        return False
    first = parts[0]
    if any(p.nlist != first.nlist or p.nprobe != first.nprobe or p.d != first.d
           or p.metric_type != first.metric_type for p in parts):
        return False
    if len({_quantizer_address(p) for p in parts}) == 1:
        return True          # one quantizer object (`coarse.attach`): the same centroids
    try:
        centroids = _centroid_digest(first.quantizer)   # raises where it cannot give them
        return all(_centroid_digest(p.quantizer) == centroids for p in parts[1:])
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


def read_faiss_index(path: Path):
    """Load an index written by `ann_build.build_faiss_index`, memory-mapped where the type allows it."""
    import faiss

    try:
        return faiss.read_index(str(path), faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY)
    except RuntimeError:
        return faiss.read_index(str(path))


def read_quantizer(path: Path, lists: int, dim: int, label: str | Path,
                   name: str = "quantizer.faiss"):
    """An index's shared coarse quantizer (`write_quantizer`), read and checked: `lists`
    centroids of `dim` dimensions, inner product, and a sound graph where it is HNSW.

    Raises:
        IndexFormatError: it cannot be read or does not check (naming `tapt index reindex`,
            which trains it again).
    """
    try:
        quantizer = read_faiss_index(path)
    except (RuntimeError, MemoryError) as exc:
        first = str(exc).strip().splitlines()[-1][:200] if str(exc).strip() else ""
        raise damaged(label, f"{name} cannot be read ({first}); {RETRAIN.format(label=label)}"
                      ) from exc
    try:
        check_faiss_index(quantizer, lists, dim, label, 0, name)
    except IndexFormatError as exc:
        raise IndexFormatError(f"{exc}; {RETRAIN.format(label=label)}") from None
    return quantizer


RETRAIN = ("run tapt index repair {label} (trains the quantizer again and rebuilds the FAISS "
           "parts from the stored embeddings)")


def with_quantizer(part, quantizer, label: str | Path, name: str = "index.faiss"):
    """`part` (read from disk) given its index's shared quantizer (`coarse.attach`); `part`
    as it is where the index stores none (`quantizer` None).

    Raises:
        IndexFormatError: the part is not an IVF index over that many centroids.
    """
    if quantizer is None:
        return part
    ivf = coarse.ivf_of(part)
    if ivf is None or ivf.nlist != quantizer.ntotal or ivf.d != quantizer.d:
        raise damaged(label, f"{name} is not an IVF part over the index's {quantizer.ntotal:,} "
                             "coarse centroids")
    coarse.attach(part, quantizer)
    return part


def set_search_param(index, name: str, value: int) -> None:
    """Set `nprobe` (IVF) or `efSearch` (HNSW) on an index (every part of a sharded one),
    through any wrapping transform."""
    import faiss

    if isinstance(index, ShardedFaiss):
        index.set_param(name, value)
        return
    faiss.ParameterSpace().set_index_parameter(index, name, int(value))
    if name == "nprobe":
        coarse.set_nprobe_ef(index, int(value))


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
