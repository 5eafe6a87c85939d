"""knn: kNN-TAPT (Gururangan et al. 2020), the union of every task sentence's nearest neighbours."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace

import numpy as np

from tapt.retriever.methods.base import Method, Params, param, take
from tapt.retriever.methods.registry import register
from tapt.retriever.scoring import arrays

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KnnParams(Params):
    k: int = param(50, "Neighbours per task sentence.", minimum=1, short="-k")
    nprobe: int | None = param(None, "IVF indexes: inverted lists searched per query [default: "
                               "the index's calibrated one, recall@100 >= 0.95].", minimum=1)
    ef_search: int | None = param(None, "HNSW indexes: efSearch [default: the index's "
                                  "calibrated one].", minimum=1)


def faiss_label(index, nprobe: int | None, ef_search: int | None) -> str:
    """The FAISS index and search parameter a search used, e.g. `HNSW32 efSearch 128`."""
    from tapt.indexer.ann.faiss_index import search_setting

    info = index.manifest.get("faiss", {})
    _, name, value = search_setting(info, index.n_sentences, index.dim, nprobe, ef_search)
    return f"{info.get('factory', 'Flat')}" + (f" {name} {value}" if name else "")


@register
class Knn(Method):
    name = "knn"
    summary = "Union of each task sentence's k nearest corpus sentences (kNN-TAPT)."
    help = """Segments touched by the union rank by the mean, over their sentences, of each
    sentence's exact best cosine to any task sentence. On an approximate FAISS index the
    neighbours are candidates rescored exactly from the stored embeddings.

    \b
    Example:
      tapt select knn idx --task task.jsonl --k 50 --out sel.jsonl
    """
    order = 20
    budget = "optional"
    budget_help = "the whole union"
    can_prerank = True
    Params = KnnParams

    def rank(self, ctx, params):
        index, view = ctx.index, ctx.view
        task = ctx.need_task(self.name)
        k = min(params.k, index.n_sentences)
        t0 = time.perf_counter()
        distances, ids = index.search(task, k, nprobe=params.nprobe, ef_search=params.ef_search)
        search_s = time.perf_counter() - t0
        union, _ = arrays.knn_union(distances, ids)
        candidates = np.unique(arrays.segment_of_rows(view.offsets, union))
        rows = arrays.rows_of_segments(view.offsets, candidates)
        best = arrays.max_similarity(index.embeddings[rows] if len(rows) else rows, task,
                                      ids=rows)
        cand_scores = arrays.segment_mean(best, view.lengths[candidates])
        ranking = arrays.rank(cand_scores)     # only the candidates: no score per segment
        info = {"union_sentences": int(len(union)), "candidate_segments": int(len(candidates)),
                "search_seconds": round(search_s, 3),
                "faiss": faiss_label(index, params.nprobe, params.ef_search)}
        log.info("knn union: %d distinct sentences in %d segments", len(union), len(candidates))
        return take(view, candidates[ranking], cand_scores[ranking], ctx.budget, info,
                    ranked=True)

    def full_ranking(self, ctx, params):
        return self.rank(replace(ctx, budget=None), params)

    def sentence_scores(self, ctx, params):
        """The sentence-level kNN ranking: each union sentence's best similarity among the
        search results, -inf outside the union."""
        index = ctx.index
        distances, ids = index.search(ctx.need_task(self.name), min(params.k, index.n_sentences),
                                      nprobe=params.nprobe, ef_search=params.ef_search)
        union, best = arrays.knn_union(distances, ids)
        out = np.full(index.n_sentences, -np.inf, dtype=np.float32)
        out[union] = best
        return out, {}

    def depends_on_budget(self, params):
        return False
