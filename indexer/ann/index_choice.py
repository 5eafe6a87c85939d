"""Which FAISS index to build for a corpus: pure arithmetic on (rows, dims, memory budget).

No faiss import, so the rules can be tested and printed cheaply. Like autofaiss, the choice goes
by size first and memory second:

    small   n <= 100,000       Flat: exact search is fast enough (2,000 queries in ~1.3 s on
                               2 cores, as fast as HNSW there: benchmarks/results/speed_index.md)
    medium  n <= 500,000       HNSW{M}, M the largest of 32/16/8 that fits the budget
    large   n  > 500,000       IVF{nlist},PQ{m}x4fs: 4-bit fast-scan product quantisation,
                               optionally behind an OPQ rotation; trained on a seeded sample.
                               From HNSW_QUANTIZER_LISTS lists on, IVF{nlist}_HNSW32: the coarse
                               quantizer is an HNSW graph over the centroids (as autofaiss
                               builds), so assigning a row costs a graph walk, not a product
                               with every centroid (benchmarks/coarse_quantizer.py)

An IVF index stores its coarse quantizer once (`quantizer.faiss` beside the manifest), not in
every shard's part (`shared_quantizer` in its parameters; indexes built before keep one in each
part). A type that does not fit the budget falls through to the next, more compact one. The budget is
for the FAISS index a process holds in RAM: the whole index when it has one shard, its largest
shard's part when it has several (`part_rows`: a search of a sharded index loads one part at a
time, a build indexes each shard's part in its own task, and a served index's actors each hold
only their own shards'); the type and its lists still go by the whole row count. The embeddings
stay memory-mapped on disk and are read only to rescore candidates exactly, so approximate
search never decides the final ranking alone. The default
budget (`memory` "auto") is `MEMORY_SHARE` of the memory this process may still allocate
(`tapt.util.machine.available_memory`: MemAvailable, capped by a cgroup limit), 8G where that is
not known.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from tapt.errors import InputError
from tapt.util.machine import MEMORY_SHARE, available_memory
from tapt.util.sizes import parse_memory as parse_size

KINDS = ("flat", "hnsw", "ivfpq")
REQUESTS = ("auto",) + KINDS
SMALL_MAX = 100_000
MEDIUM_MAX = 500_000
DEFAULT_MEMORY = "auto"       # MEMORY_SHARE of the machine's available memory (`memory_budget`)
FALLBACK_MEMORY = 8 << 30    # "auto" where the available memory is not known
IVFPQ_MIN_ROWS = 1_000
HNSW_M = (32, 16, 8)
HNSW_EF_CONSTRUCTION = 40
# from this many IVF lists on, the coarse quantizer is an HNSW graph: assigning a row through it
# (efSearch QUANTIZER_EF) cost 55 us at 8,192 lists and 203 us at 65,536, against 42 and 333 us
# comparing it with every centroid; a 2M-row index at 32,768 lists added 178 us a row through it
# against 166 comparing every centroid, and searched it at recall@100 0.988 against 1.000 (2
# cores; benchmarks/results/scale/coarse_quantizer.md), so brute force up to 32,768 lists and the
# graph from 65,536 (~5.4e8 rows) on, where it halved the add (166 against 322 us a row) for
# 1.6 points of recall@100 at efSearch 64
HNSW_QUANTIZER_LISTS = 65536
QUANTIZER_M = 32             # its links per centroid (autofaiss's IVF{n}_HNSW32)
# its efSearch when rows are added (a search uses max(this, 2 nprobe)): at 65,536 lists 64 sends
# 99.9% of rows to their nearest list, at 262,144 lists 96.8%, where 128 sends 99.3% at 274 us a
# row against brute force's 1,138 (benchmarks/results/scale/coarse_quantizer.md), so from
# QUANTIZER_EF_LARGE_LISTS lists on the graph searches QUANTIZER_EF_LARGE (`quantizer_ef`)
QUANTIZER_EF = 64
QUANTIZER_EF_LARGE = 128
QUANTIZER_EF_LARGE_LISTS = 131072
NPROBE_SWEEP = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
EF_SEARCH_SWEEP = (16, 32, 64, 128, 256, 512, 1024)
TRAIN_PER_LIST = 40          # faiss warns below 39 training points per centroid
TRAIN_MIN = 10_000
RESCORE_MIN = 100            # approximate search fetches at least this many candidates ...
RESCORE_FACTOR = {"hnsw": 1, "ivfpq": 4}  # ... and this many times k, rescored exactly
RESCORE_FACTORS = {"hnsw": (1,), "ivfpq": (4, 8, 16)}  # tried in turn by the calibration

def memory_budget(memory: str | int = DEFAULT_MEMORY, available: int | None = None
                  ) -> tuple[int, str]:
    """The RAM budget `memory` stands for, and where it comes from.

    Args:
        memory: A size ("8G", "512M", bytes) or "auto": `MEMORY_SHARE` of the memory this
            process may still allocate (`available_memory`), FALLBACK_MEMORY where unknown.
        available: For "auto": the bytes free where the work runs (a cluster node's, asked
            there), instead of this process's machine's.

    Returns:
        (bytes, a phrase naming its source: "given", or "auto: 50% of 22.0 GB available").

    Raises:
        InputError: not a size.
    """
    if isinstance(memory, str) and memory.strip().lower() == "auto":
        free = available if available is not None else available_memory()
        if free is None:
            return FALLBACK_MEMORY, f"auto: {format_bytes(FALLBACK_MEMORY)} (available " \
                                    "memory not known)"
        budget = max(1, int(free * MEMORY_SHARE))
        return budget, f"auto: {MEMORY_SHARE:.0%} of {format_bytes(free)} available"
    return parse_size(memory), "given"


def parse_memory(spec: str | int) -> int:
    """`8G`, `512M`, `1.5GB`, bytes, or "auto" (see `memory_budget`) -> bytes."""
    return memory_budget(spec)[0]


def format_bytes(size: float) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{int(size)} B"


@dataclass
class IndexChoice:
    """A FAISS index to build: factory string, parameters, and why it was chosen."""

    kind: str
    factory: str
    params: dict[str, Any]
    estimated_bytes: int
    reason: str
    requested: str = "auto"
    memory_budget_bytes: int | None = None
    train_size: int = 0
    seed: int = 0
    search_param: str | None = None          # "nprobe" (IVF) or "efSearch" (HNSW)
    search_sweep: tuple[int, ...] = field(default_factory=tuple)
    part_rows: int = 0          # rows of the largest shard's part (0: one part, every row)
    part_bytes: int = 0         # its estimated RAM: what the budget is checked against

    @property
    def held_bytes(self) -> int:
        """RAM of the FAISS index a process holds at once: the largest part of a sharded
        index, else the whole index."""
        return self.part_bytes or self.estimated_bytes

    @property
    def approximate(self) -> bool:
        return self.kind != "flat"

    def manifest(self) -> dict[str, Any]:
        """The keys this choice adds to the manifest's `faiss` section."""
        out = {k: v for k, v in asdict(self).items() if k not in ("search_sweep", "train_size",
                                                                   "seed", "search_param")}
        out["train"] = {"sample": self.train_size, "seed": self.seed}
        return out


def rescore_k(k: int, kind: str, n: int, factor: int | None = None) -> int:
    """How many candidates an approximate search fetches for the exact top `k` (`factor` x k,
    the recorded one or the kind's default, and at least RESCORE_MIN)."""
    if kind == "flat":
        return min(k, n)
    factor = int(factor or RESCORE_FACTOR.get(kind, 1))
    return min(n, max(k * factor, RESCORE_MIN, k))


def flat_bytes(n: int, dim: int) -> int:
    return n * dim * 4


def hnsw_bytes(n: int, dim: int, m: int) -> int:
    # vectors + level-0 links (2M int32) + upper levels (~1/M of the rows, M links each)
    return n * dim * 4 + int(n * m * 2 * 4 * (1 + 1 / m)) + n * 16


def ivfpq_bytes(n: int, dim: int, nlist: int, m: int, nbits: int = 4, opq: bool = False,
                quantizer_m: int = 0) -> int:
    """RAM of an IVF-PQ fast-scan index (or part) of `n` rows: codes, ids, the lists' padding,
    the coarse quantizer (with `quantizer_m` HNSW links per centroid) and the codebooks."""
    codes = n * m * nbits // 8 + n * 8                 # codes + int64 ids
    padding = nlist * 32 * m * nbits // 8              # fast-scan lists pad to blocks of 32
    return codes + padding + quantizer_bytes(nlist, dim, quantizer_m) + \
        m * (1 << nbits) * (dim // m) * 4 + (dim * dim * 4 if opq else 0)


def quantizer_bytes(nlist: int, dim: int, quantizer_m: int = 0) -> int:
    """The coarse quantizer's centroids, and its HNSW graph where it has one."""
    return nlist * dim * 4 + (hnsw_bytes(nlist, 0, quantizer_m) if quantizer_m else 0)


def ivf_quantizer(nlist: int) -> str:
    """The coarse quantizer of an IVF index of `nlist` lists: "flat" (every centroid compared)
    or "hnsw" (a graph over the centroids, from HNSW_QUANTIZER_LISTS lists on)."""
    return "hnsw" if nlist >= HNSW_QUANTIZER_LISTS else "flat"


def ivf_nlist(n: int) -> int:
    """Inverted lists: a power of two near 2 sqrt(n), with >= 40 training rows per list."""
    target = 2 ** round(math.log2(max(2.0, 2 * math.sqrt(n))))
    return int(max(1, min(target, n // TRAIN_PER_LIST)))


def quantizer_ef(nlist: int) -> int:
    """The efSearch of an HNSW coarse quantizer over `nlist` lists (see QUANTIZER_EF)."""
    return QUANTIZER_EF_LARGE if nlist >= QUANTIZER_EF_LARGE_LISTS else QUANTIZER_EF


def ivf_train_size(n: int, nlist: int) -> int:
    """Training rows of an IVF index: `TRAIN_PER_LIST` per inverted list, at least
    `TRAIN_MIN` (every row of a smaller corpus); at 10M rows, 327,680 rows for 8,192 lists."""
    return int(min(n, max(TRAIN_MIN, TRAIN_PER_LIST * nlist)))


def pq_subquantizers(dim: int) -> list[int]:
    """Even divisors m of `dim` with 2, 4 or 8 dimensions per sub-quantizer, largest first."""
    return [dim // s for s in (2, 4, 8) if dim % s == 0 and (dim // s) % 2 == 0]


def _estimate(est: int, held: int, part: int, n: int, budget: int) -> str:
    """The reason's size clause: the whole index's estimate, and its largest part's when it
    has several (what is checked against the budget)."""
    if part >= n:
        return f"estimated {format_bytes(est)} <= budget {format_bytes(budget)}"
    return (f"estimated {format_bytes(est)}, its largest part ({part:,} rows, one held at a "
            f"time) {format_bytes(held)} <= budget {format_bytes(budget)}")


def _part(part: int, n: int, held: int) -> dict[str, int]:
    """The choice's `part_rows` and `part_bytes`: those of its largest part when it has several
    (`part` < `n`), else none."""
    return {"part_rows": part, "part_bytes": held} if part < n else {}


def _flat(n: int, dim: int, requested: str, budget: int, why: str, part: int) -> IndexChoice:
    est, held = flat_bytes(n, dim), flat_bytes(part, dim)
    return IndexChoice("flat", "Flat", {}, est, f"{why}; Flat (exact), "
                       + _estimate(est, held, part, n, budget), requested, budget,
                       **_part(part, n, held))


def _hnsw(n: int, dim: int, requested: str, budget: int, why: str,
          part: int) -> IndexChoice | None:
    for m in HNSW_M:
        est, held = hnsw_bytes(n, dim, m), hnsw_bytes(part, dim, m)
        if held <= budget:
            return IndexChoice(
                "hnsw", f"HNSW{m}", {"M": m, "efConstruction": HNSW_EF_CONSTRUCTION}, est,
                f"{why}; HNSW{m}, " + _estimate(est, held, part, n, budget),
                requested, budget, search_param="efSearch", search_sweep=EF_SEARCH_SWEEP,
                **_part(part, n, held))
    return None


def _ivfpq(n: int, dim: int, requested: str, budget: int, why: str, seed: int,
           opq: bool, part: int) -> IndexChoice | None:
    nlist = ivf_nlist(n)
    quantizer = ivf_quantizer(nlist)
    qm = QUANTIZER_M if quantizer == "hnsw" else 0
    for m in pq_subquantizers(dim):
        est = ivfpq_bytes(n, dim, nlist, m, 4, opq, qm)
        held = ivfpq_bytes(part, dim, nlist, m, 4, opq, qm)
        if held > budget:
            continue
        prefix = f"OPQ{m}," if opq else ""
        coarse = f"IVF{nlist}_HNSW{qm}" if qm else f"IVF{nlist}"
        factory = f"{prefix}{coarse},PQ{m}x4fs"
        params = {"nlist": nlist, "m": m, "nbits": 4, "fast_scan": True, "opq": opq,
                  "quantizer": quantizer, "shared_quantizer": True}
        if qm:
            params.update(quantizer_M=qm, quantizer_efConstruction=HNSW_EF_CONSTRUCTION,
                          quantizer_efSearch=quantizer_ef(nlist))
        return IndexChoice(
            "ivfpq", factory, params,
            est, f"{why}; {factory}, " + _estimate(est, held, part, n, budget), requested,
            budget, train_size=ivf_train_size(n, nlist), seed=seed, search_param="nprobe",
            search_sweep=tuple(p for p in NPROBE_SWEEP if p <= nlist) or (1,),
            **_part(part, n, held))
    return None


def choose_index(n: int, dim: int, memory: int | str = DEFAULT_MEMORY, requested: str = "auto",
                 seed: int = 0, opq: bool = False, part_rows: int | None = None) -> IndexChoice:
    """The FAISS index for `n` rows of `dim` dims within `memory` bytes (`requested` or auto).

    Args:
        n: Rows of the whole index (they decide the type and its inverted lists).
        dim: Embedding dimensions.
        memory: The RAM budget ("auto", a size or bytes; see `memory_budget`).
        requested: auto, flat, hnsw or ivfpq.
        seed: The training sample's seed.
        opq: Put an OPQ rotation before IVF-PQ.
        part_rows: Rows of the largest shard of a sharded index (None: one shard): the budget
            is checked against that part, the most a process holds at once.

    Returns:
        The choice, with its estimates and the reason for it.

    Raises:
        InputError: an unknown type, or no type fits the budget (naming the fix).
    """
    if requested not in REQUESTS:
        raise InputError(f"{requested!r}: use one of {', '.join(REQUESTS)}", param="index")
    if n < 1 or dim < 1:
        raise InputError("an index needs at least one row")
    budget = parse_memory(memory)
    size = f"n = {n:,}"
    part = max(1, min(n, int(part_rows))) if part_rows else n
    if requested == "ivfpq" and n < IVFPQ_MIN_ROWS:
        raise InputError(f"ivfpq needs at least {IVFPQ_MIN_ROWS:,} sentences "
                         f"(this index has {n:,}): use flat or hnsw", param="index")
    if requested == "ivfpq" and not pq_subquantizers(dim):
        raise InputError(f"ivfpq needs a dimension divisible by 4 (this model has {dim})",
                         param="index")
    if requested == "flat" or (requested == "auto" and n <= SMALL_MAX):
        why = f"{size} <= {SMALL_MAX:,} (small)" if requested == "auto" else "--index flat"
        if flat_bytes(part, dim) <= budget:
            return _flat(n, dim, requested, budget, why, part)
        if requested == "flat":
            raise _too_small("flat", flat_bytes(part, dim), budget)
    if requested == "hnsw" or (requested == "auto" and n <= MEDIUM_MAX):
        why = (f"{size} <= {MEDIUM_MAX:,} (medium)" if n > SMALL_MAX else
               f"{size}, Flat does not fit") if requested == "auto" else "--index hnsw"
        choice = _hnsw(n, dim, requested, budget, why, part)
        if choice is not None:
            return choice
        if requested == "hnsw":
            raise _too_small(f"HNSW{HNSW_M[-1]}", hnsw_bytes(part, dim, HNSW_M[-1]), budget)
    why = (f"{size} > {MEDIUM_MAX:,} (large)" if n > MEDIUM_MAX else
           f"{size}, HNSW does not fit") if requested == "auto" else "--index ivfpq"
    if n >= IVFPQ_MIN_ROWS and pq_subquantizers(dim):
        choice = _ivfpq(n, dim, requested, budget, why, seed, opq, part)
        if choice is not None:
            return choice
        m, nlist = pq_subquantizers(dim)[-1], ivf_nlist(n)
        qm = QUANTIZER_M if ivf_quantizer(nlist) == "hnsw" else 0
        raise _too_small("the most compact IVF-PQ",
                         ivfpq_bytes(part, dim, nlist, m, 4, opq, qm), budget,
                         part < n, sharding=True)
    raise _too_small(f"HNSW{HNSW_M[-1]}", hnsw_bytes(part, dim, HNSW_M[-1]), budget, part < n)


def _too_small(what: str, needed: int, budget: int, sharded: bool = False,
               sharding: bool = False) -> InputError:
    more = "" if what.startswith("the most compact") else \
        " (or `index` ivfpq, the most compact type)"
    held = " for its largest shard's part" if sharded else ""
    shards = (" or build it in more shards (`shard_size`: one shard's FAISS part is held at a "
              "time)" if sharding else "")
    return InputError(f"{format_bytes(budget)} is too small: {what} needs about "
                      f"{format_bytes(needed)}{held}; give `memory` {_round_up(needed)} or more"
                      f"{more}{shards}", param="memory")


def _round_up(size: int) -> str:
    """`size` bytes as a `memory` value of whole MB or GB, rounded up."""
    if size > 1 << 30:
        return f"{-(-size // (1 << 30))}G"
    return f"{max(1, -(-size // (1 << 20)))}M"


def choice_from_manifest(faiss_info: dict[str, Any], n: int, dim: int) -> IndexChoice:
    """The choice recorded in a manifest's `faiss` section (old indexes record only `Flat`)."""
    factory = str(faiss_info.get("factory", "Flat"))
    kind = faiss_info.get("kind") or ("flat" if factory == "Flat" else
                                      "hnsw" if factory.startswith("HNSW") else "ivfpq")
    if kind not in KINDS:
        raise InputError(f"unknown FAISS index kind {kind!r} in the manifest")
    params = dict(faiss_info.get("params") or {})
    if kind == "ivfpq":     # the parts share one stored quantizer only where it is recorded
        params["shared_quantizer"] = bool(faiss_info.get("quantizer"))
    train = faiss_info.get("train") or {}
    sweep: tuple[int, ...] = ()
    param = None
    if kind == "hnsw":
        param, sweep = "efSearch", EF_SEARCH_SWEEP
    elif kind == "ivfpq":
        nlist = int(params.get("nlist") or ivf_nlist(n))
        param, sweep = "nprobe", tuple(p for p in NPROBE_SWEEP if p <= nlist) or (1,)
    return IndexChoice(kind, factory, params, int(faiss_info.get("estimated_bytes") or 0),
                       str(faiss_info.get("reason") or f"recorded factory {factory}"),
                       str(faiss_info.get("requested") or kind),
                       faiss_info.get("memory_budget_bytes"),
                       int(train.get("sample") or (ivf_train_size(n, int(params.get("nlist", 1)))
                                                   if kind == "ivfpq" else 0)),
                       int(train.get("seed") or 0), param, sweep)
