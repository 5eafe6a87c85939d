"""Orchestration of `tapt bench recall`: open (or build) the index, embed seeds once, run, write."""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from tapt.bench import recall, recall_report
from tapt.bench.labelled_pool import read_seed_sets
from tapt.errors import InputError
from tapt.indexer.index import Index
from tapt.retriever.evaluation.oracle import sentence_labels
from tapt.util.files import (
    IrregularFileError,
    atomic_write,
    ensure_dir,
    read_regular,
    real_path,
    regular_file,
    write_json_atomic,
)
from tapt.util.safety import check_output
from tapt.util.versions import library_versions, utc_now

log = logging.getLogger(__name__)


def open_or_build_index(pool: Path | None, index_path: Path | None, cache: Path,
                        progress: bool) -> Index:
    """`index_path` if given, else an index of the pool built once under `cache` (--no-split)."""
    if index_path is not None:
        return Index(index_path)
    if pool is None:
        raise InputError("give `pool` (to index it) or `index_path`")
    from tapt.indexer.building.pipeline import BuildConfig, build_index
    from tapt.indexer.encoding.encoder import SentenceTransformerEncoder

    digest = hashlib.sha256(str(real_path(pool)).encode()).hexdigest()[:12]
    out = cache / f"index-{digest}"
    if not (out / "manifest.json").exists():
        build_index([pool], out, SentenceTransformerEncoder(None),
                    BuildConfig(split=False, progress=progress))
    return Index(out)


CACHE_MARKER = ".tapt-bench-cache"
_CACHE_ENTRY = re.compile(r"^(seeds-.+\.npy|dsir-.+\.npz|index-[0-9a-f]+|\..+)$")


def _is_results(path: Path) -> bool:
    """A directory holding an earlier `tapt bench recall` report."""
    try:
        report = json.loads(read_regular(path / "recall.json"))
    except (OSError, ValueError):
        return False
    return isinstance(report, dict) and "aggregate" in report and "results" in report


def _is_cache(path: Path) -> bool:
    """A directory holding only what `tapt bench recall` caches."""
    return (path / CACHE_MARKER).is_file() or all(_CACHE_ENTRY.match(p.name)
                                                   for p in path.iterdir())


def check_bench_outputs(out_dir: Path, cache: Path, inputs: list[Path]) -> None:
    """The output rule for `bench recall`: results and cache directories are new, empty or
    tapt's own, apart from each other, and never an input or inside one (or an index)."""
    check_output(out_dir, what="benchmark results directory", inputs=inputs + [cache],
                 directory=True, ours=_is_results, param="out")
    check_output(cache, what="benchmark cache", inputs=inputs + [out_dir], directory=True,
                 ours=_is_cache, param="cache")


def _atomic_write(path: Path, text: str) -> None:
    with atomic_write(path) as fh:
        fh.write(text)


def seed_embeddings(index: Index, seed_sets, cache: Path) -> dict[str, np.ndarray]:
    """Embeddings of every seed sentence with the index's model (checked against the index).

    They go through the task-embedding cache (`retriever.tasks.embedding`), keyed by the model's
    full fingerprint, backend and dtype and checksummed, so a model change or a damaged entry never
    reuses stale vectors. `cache` is kept for callers; seed embeddings no longer live there.
    """
    from tapt.retriever.tasks.embedding import encode_cached

    encoder = index.load_encoder()
    index.check_encoder(encoder)
    return {s.domain: encode_cached(encoder, s.texts)[0] for s in seed_sets}


def dsir_features(index: Index, texts: list[str], cache: Path, progress: bool):
    from tapt.bench.dsir_baseline import PoolFeatures

    path = cache / f"dsir-{index.uuid}.npz"
    regular = not path.is_symlink()
    if path.exists() or path.is_symlink():
        try:
            return PoolFeatures.load(regular_file(path, follow=False))
        except Exception as exc:  # noqa: BLE001 - numpy, scipy and zipfile raise many kinds
            regular = not isinstance(exc, IrregularFileError)
            log.warning("ignoring the cached DSIR features %s (%s); computing them again",
                        path, exc)
    features = PoolFeatures(texts, progress=progress)
    if regular:      # an entry that is not a regular file is never replaced
        tmp = path.with_name(f".{path.name}.tmp.npz")
        features.save(tmp)
        tmp.replace(path)
    return features


def dsir_library_check(shared: recall.Shared, seed_set, progress: bool = True
                       ) -> dict[str, Any]:
    """Run the package end to end once; compare its weights with the cached path's."""
    from tapt.bench.dsir_baseline import run_library

    weights, seconds = run_library(shared.texts, seed_set.texts, progress=progress)
    mine = shared.dsir.weights(seed_set.texts)
    n = int((shared.labels == seed_set.domain).sum())
    top_lib = set(np.argsort(-weights, kind="stable")[:n].tolist())
    top_mine = set(np.argsort(-mine, kind="stable")[:n].tolist())
    return {"domain": seed_set.domain, "seeds": len(seed_set.texts),
            "library_seconds": round(seconds, 1),
            "max_abs_weight_difference": float(np.max(np.abs(weights - mine))),
            "top_k_overlap": round(len(top_lib & top_mine) / n, 4)}


def bench_recall(pool: Path | None, seeds_dir: Path, index_path: Path | None, methods: list[str],
                 seed_sizes: list[int], budgets: str, repeats: int, segment_sizes: list[int],
                 out_dir: Path, cache: Path, label_field: str = "domain",
                 domains: list[str] | None = None, progress: bool = True,
                 contexts: Sequence[str] = ("auto",)) -> dict[str, Any]:
    """Run the grid and write recall.json, recall.md and pr-<domain>.png into `out_dir`
    (`contexts`: how methods that pool sentence scores are cut; "auto", the default, is what
    `tapt select` uses on this index: rows `METHOD+document` where that is document context,
    `METHOD` where it is sentence context).
    """
    budget_list = recall.parse_budgets(budgets)
    if repeats < 1 or any(n < 2 for n in seed_sizes):
        raise InputError("`repeats` must be >= 1 and every one of `seed_sizes` >= 2")
    methods = list(recall.all_methods()) if methods == ["all"] else methods
    check_bench_outputs(out_dir, cache, [p for p in (pool, seeds_dir, index_path) if p])
    ensure_dir(cache)
    write_json_atomic(cache / CACHE_MARKER, {"written_by": "tapt bench recall"})
    ensure_dir(out_dir)
    t_start = time.perf_counter()
    index = open_or_build_index(pool, index_path, cache, progress)
    seed_sets = read_seed_sets(seeds_dir, domains)
    labels = sentence_labels(index, label_field, progress=progress)
    shared = recall.Shared(index=index, labels=labels)
    extra: dict[str, Any] = {}
    if "dsir" in methods:
        shared.dsir = dsir_features(index, shared.texts, cache, progress)
        extra["dsir_library_check"] = dsir_library_check(shared, seed_sets[0], progress)
    _, auto = recall.resolve_contexts(shared, contexts)
    embeddings = seed_embeddings(index, seed_sets, cache)
    results, curves = recall.run(shared, seed_sets, embeddings, methods, seed_sizes, budget_list,
                                 repeats, segment_sizes, progress, contexts=contexts)
    agg = recall_report.aggregate(results)
    oracle = {s.domain: int((labels == s.domain).sum()) for s in seed_sets}
    report = {
        "created": utc_now(), "index": str(index.path), "index_uuid": index.uuid,
        "index_counts": index.manifest["counts"], "model": index.manifest["model"]["name"],
        "config": {"methods": methods, "seed_sizes": seed_sizes, "budgets": budgets,
                   "repeats": repeats, "segment_sizes": segment_sizes, "label_field": label_field,
                   "contexts": list(contexts),
                   **({"auto_context": auto.to_json()} if auto is not None else {}),
                   "seeds_dir": str(seeds_dir), "pool": str(pool) if pool else None},
        "oracle_sentences": oracle, **extra, "seconds": round(time.perf_counter() - t_start, 1),
        "versions": library_versions(), "aggregate": agg, "results": results, "pr_curves": curves,
    }
    _atomic_write(out_dir / "recall.json", json.dumps(report, indent=1) + "\n")
    _atomic_write(out_dir / "recall.md", recall_report.markdown(
        agg, [b for b, _ in budget_list]) + "\n")
    recall_report.plot_pr_curves(curves, out_dir, oracle)
    return report
