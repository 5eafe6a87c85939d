"""The coarse quantizer of an IVF index: its HNSW settings, its storage once per index, and its
k-means and row assignment through torch.

Stored once: a sharded IVF index's parts all share one trained quantizer, so it is written once,
as `quantizer.faiss` beside the manifest, and each part is written with an empty stand-in
(`detached`); opening a part puts the shared one back (`attach`). At 10^10 rows in 2M-row parts
that is 5,000 copies of a 262,144-list quantizer (403 MB each) not written.

Through torch: where a GPU is visible and faiss-gpu is not installed (`torch_device`), the two
steps of an IVF build that grow with lists x rows run as matrix products in the torch that is
already installed: the k-means of training (FAISS's `contrib.clustering.kmeans` over a
torch-backed assignment, spherical as FAISS trains an inner-product IVF) and the coarse
assignment of every added row (FAISS's `contrib.ivf_tools.add_preassigned`). Indexes with an OPQ
rotation keep FAISS's own path. The index written is the same kind of CPU index either way.
"""

from __future__ import annotations

import contextlib
import io
import os
from typing import Any, Iterator

import numpy as np

from tapt.indexer.ann.index_choice import QUANTIZER_EF, quantizer_ef

ASSIGN_BLOCK = 1 << 28     # float32 similarities per block of a torch assignment (1 GiB)
TORCH_ENV = "TAPT_FAISS_GPU"


def ivf_of(index) -> Any:
    """The IVF index inside `index` (through a pre-transform), or None for other types."""
    import faiss

    try:
        return faiss.extract_index_ivf(index)
    except RuntimeError:
        return None


def hnsw_of(quantizer) -> Any:
    """`quantizer` as an HNSW index, or None where it is not one."""
    import faiss

    inner = faiss.downcast_index(quantizer)
    return inner if isinstance(inner, faiss.IndexHNSW) else None


def configure(index, params: dict[str, Any]) -> None:
    """An HNSW coarse quantizer's construction and add-time search settings from the choice's
    parameters (`index_choice`: `quantizer_efConstruction`, `quantizer_efSearch`)."""
    ivf = ivf_of(index)
    graph = hnsw_of(ivf.quantizer) if ivf is not None else None
    if graph is None:
        return
    graph.hnsw.efConstruction = int(params.get("quantizer_efConstruction", 40))
    graph.hnsw.efSearch = int(params.get("quantizer_efSearch", QUANTIZER_EF))


def search_ef(nprobe: int, nlist: int) -> int:
    """The efSearch of an HNSW quantizer over `nlist` lists for a search of `nprobe` lists (as
    autofaiss sets it: twice the lists, and at least the add's)."""
    return max(quantizer_ef(nlist), 2 * int(nprobe))


def set_nprobe_ef(index, nprobe: int) -> None:
    """Where `index` is an IVF index over an HNSW quantizer: its efSearch for `nprobe` lists."""
    ivf = ivf_of(index)
    graph = hnsw_of(ivf.quantizer) if ivf is not None else None
    if graph is not None:
        graph.hnsw.efSearch = search_ef(nprobe, int(ivf.nlist))


def quantizer_of(template) -> Any:
    """A copy of the trained coarse quantizer of an IVF template."""
    import faiss

    return faiss.clone_index(ivf_of(template).quantizer)


@contextlib.contextmanager
def detached(index) -> Iterator[None]:
    """Within: the IVF index's quantizer replaced by an empty flat index of its dimension and
    metric (what a part is written with when its index stores the quantizer once)."""
    import faiss

    ivf = ivf_of(index)
    own, quantizer = ivf.own_fields, ivf.quantizer
    stub = faiss.IndexFlat(ivf.d, ivf.metric_type)
    ivf.quantizer, ivf.own_fields = stub, False
    try:
        yield
    finally:
        ivf.quantizer, ivf.own_fields = quantizer, own


def attach(part, quantizer) -> None:
    """Give an IVF part read from disk the index's shared quantizer in place of its stand-in
    (the stand-in freed; the part keeps a reference to the quantizer)."""
    import faiss

    ivf = ivf_of(part)
    empty, owned = ivf.quantizer, ivf.own_fields
    ivf.quantizer, ivf.own_fields = quantizer, False
    if owned:   # freed by an owner in FAISS (a Python object made to own it corrupts SWIG)
        holder = faiss.IndexPreTransform(empty)
        holder.own_fields = True
        del holder
    part.referenced_objects = [*getattr(part, "referenced_objects", []), quantizer]


def attached(part) -> Any:
    """The shared quantizer `attach` gave `part` (kept alive by it), or None."""
    ivf = ivf_of(part)
    if ivf is None:
        return None
    address = int(ivf.quantizer.this)
    return next((held for held in getattr(part, "referenced_objects", [])
                 if int(getattr(held, "this", 0) or 0) == address), None)


def stand_in(part) -> bool:
    """Whether an IVF part read from disk holds an empty stand-in for its quantizer."""
    ivf = ivf_of(part)
    return ivf is not None and ivf.quantizer.ntotal == 0


def centroids(quantizer) -> np.ndarray:
    """Every centroid of a coarse quantizer (flat or HNSW), float32."""
    return np.ascontiguousarray(quantizer.reconstruct_n(0, quantizer.ntotal), dtype=np.float32)


# ----------------------------------------------------------------------------- torch


def torch_device() -> str | None:
    """The torch device for k-means and coarse assignment: "cuda" where torch sees a GPU and
    the installed faiss has none of its own (faiss-cpu); None otherwise, or with the
    environment variable TAPT_FAISS_GPU=0 (FAISS's own CPU path)."""
    if os.environ.get(TORCH_ENV, "1").strip() == "0":
        return None
    import faiss

    if hasattr(faiss, "StandardGpuResources"):
        return None                 # faiss-gpu: FAISS runs both steps on the GPUs itself
    try:
        import torch
    except ImportError:
        return None
    return "cuda" if torch.cuda.is_available() else None


def torch_handles(index) -> bool:
    """Whether the torch path can train and fill `index`: an IVF-PQ fast-scan index with no
    pre-transform (OPQ keeps FAISS's path)."""
    import faiss

    return isinstance(faiss.downcast_index(index), faiss.IndexIVFPQFastScan)


def _assign(x, centroids) -> tuple[Any, Any]:
    """(similarity, index) of each row's most similar centroid (inner product), in blocks
    small enough for `ASSIGN_BLOCK` similarities."""
    import torch

    block = max(1, ASSIGN_BLOCK // max(1, len(centroids)))
    sims = torch.empty(len(x), dtype=torch.float32, device=x.device)
    ids = torch.empty(len(x), dtype=torch.int64, device=x.device)
    for lo in range(0, len(x), block):
        best = torch.max(x[lo:lo + block] @ centroids.T, dim=1)
        sims[lo:lo + block], ids[lo:lo + block] = best.values, best.indices
    return sims, ids


def _spherical_assign():
    """FAISS's torch k-means dataset with its search replaced by `_assign` to the centroids
    made unit length (spherical k-means, as FAISS trains an inner-product IVF)."""
    from faiss.contrib.torch.clustering import DatasetAssign

    class SphericalAssign(DatasetAssign):
        def perform_search(self, centroids):
            import torch

            sims, ids = _assign(self.x, torch.nn.functional.normalize(centroids, dim=1))
            return (2 - 2 * sims)[:, None], ids[:, None]     # squared L2 of unit vectors

    return SphericalAssign


def train_on_torch(index, sample: np.ndarray, device: str, seed: int) -> None:
    """Train an IVF-PQ fast-scan `index` on `sample`: the coarse centroids by spherical
    k-means on `device` (FAISS's iterations and seed), then FAISS's own training of the rest
    (the centroids are in place, so it trains only the product quantizer)."""
    import torch
    from faiss.contrib.clustering import kmeans

    ivf = ivf_of(index)
    x = torch.from_numpy(np.ascontiguousarray(sample, dtype=np.float32)).to(device)
    data = _spherical_assign()(x)
    with contextlib.redirect_stdout(io.StringIO()):     # its progress lines go to stdout
        found = kmeans(int(ivf.nlist), data, niter=int(ivf.cp.niter), seed=int(seed),
                       verbose=False)
    found = torch.nn.functional.normalize(found, dim=1).cpu().numpy()
    del x, data
    ivf.quantizer.reset()
    ivf.quantizer.add(np.ascontiguousarray(found, dtype=np.float32))
    ivf.quantizer.is_trained = True
    index.train(np.ascontiguousarray(sample, dtype=np.float32))


class TorchAdder:
    """Rows added to a trained IVF-PQ fast-scan index with their coarse lists found on a torch
    device (one product with every centroid): the codes go into a plain IVF-PQ index through
    `add_preassigned`, which `result` converts to the fast-scan layout (FAISS's own
    conversion: the same lists, ids and codes as FAISS's add with the same assignment).

    Args:
        template: The trained fast-scan index (empty).
        device: The torch device.
    """

    def __init__(self, template, device: str) -> None:
        import faiss
        import torch

        self.template = faiss.downcast_index(template)
        ivf = self.template
        self.plain = faiss.IndexIVFPQ(ivf.quantizer, ivf.d, ivf.nlist, ivf.pq.M, ivf.pq.nbits,
                                      ivf.metric_type)
        self.plain.pq = ivf.pq
        self.plain.by_residual = ivf.by_residual
        self.plain.is_trained = True
        self.device = device
        self.centroids = torch.from_numpy(centroids(ivf.quantizer)).to(device)

    def add(self, rows: np.ndarray, ids: np.ndarray) -> None:
        import torch
        from faiss.contrib.ivf_tools import add_preassigned

        x = np.ascontiguousarray(rows, dtype=np.float32)
        _, lists = _assign(torch.from_numpy(x).to(self.device), self.centroids)
        held = np.ascontiguousarray(ids, dtype=np.int64)      # alive while FAISS reads it
        add_preassigned(self.plain, x, lists.cpu().numpy().astype(np.int64), held)

    def result(self):
        """The fast-scan index of every row added (owning its own copy of the quantizer)."""
        import faiss

        out = faiss.IndexIVFPQFastScan(self.plain, int(self.template.bbs))
        out.orig_invlists = None         # the plain index's lists, freed with it
        quantizer = faiss.clone_index(self.template.quantizer)
        quantizer.thisown = False        # freed by `out`, which owns it from here on
        out.quantizer, out.own_fields = quantizer, True
        out.nprobe = self.template.nprobe
        return out
