"""Why `fused` works: how often the classifier's and Moore-Lewis's false positives coincide.

For each domain of a labelled pool, both methods select the oracle budget (the domain's size)
from an index, with all of the domain's seeds as the task; the script reports the share of the
classifier's false positives that Moore-Lewis also selects, and the precision where both select.

    python -m benchmarks.fusion_errors --index .cache/pool-index \
        --seeds ../shared/data/multidomain/seeds --out benchmarks/results/fusion_errors.json
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from tapt import Index

# internal: each domain's seed set is the task, as in bench recall
from tapt.bench.labelled_pool import read_seed_sets

# internal: the seed sets embedded once and cached, as bench recall does
from tapt.bench.recall_run import seed_embeddings
from tapt.extend import RankingInputs

# internal: each row's domain, to tell a method's false positives
from tapt.retriever.evaluation.oracle import sentence_labels

# internal: both methods' scores of every row, compared row by row (Index.select returns only the
#   cut)
from tapt.retriever.methods import SegmentView, get_method

# internal: the oracle budget as the methods take it
from tapt.retriever.ranking.budget import parse_budget

# internal: Moore-Lewis scores over the pool's encoding made once for every domain
from tapt.retriever.scoring.ngram_lm import Vocabulary, moore_lewis_scores

# internal: the report's version stamps and time, as tapt's own files carry them
from tapt.util.versions import library_versions, utc_now

log = logging.getLogger("fusion_errors")


def error_overlap(classifier: np.ndarray, lexical: np.ndarray, relevant: np.ndarray) -> dict:
    """Top-n of each score (n = relevant count): false-positive overlap and joint precision."""
    n = int(relevant.sum())
    a = np.argsort(-classifier, kind="stable")[:n]
    b = np.argsort(-lexical, kind="stable")[:n]
    both = np.intersect1d(a, b)
    fp_a, fp_b = a[~relevant[a]], b[~relevant[b]]
    return {"oracle": n, "classifier_precision": round(float(relevant[a].mean()), 4),
            "moore_lewis_precision": round(float(relevant[b].mean()), 4),
            "fp_overlap": round(len(np.intersect1d(fp_a, fp_b)) / max(1, len(fp_a)), 4),
            "share_selected_by_both": round(len(both) / n, 4),
            "precision_where_both": round(float(relevant[both].mean()) if len(both) else 0.0, 4)}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", type=Path, required=True)
    p.add_argument("--seeds", type=Path, required=True)
    p.add_argument("--cache", type=Path, default=Path(".cache/bench"))
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/fusion_errors.json"))
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    index = Index(args.index)
    labels = sentence_labels(index, "domain", progress=False)
    seed_sets = read_seed_sets(args.seeds)
    args.cache.mkdir(parents=True, exist_ok=True)
    embeddings = seed_embeddings(index, seed_sets, args.cache)
    vocab = Vocabulary()
    encoded = vocab.encode(index.store.texts(range(index.n_sentences)))
    rows = {}
    classifier = get_method("classifier")
    view = SegmentView.of(index, 1)
    for s in tqdm(seed_sets, desc="domains"):
        relevant = labels == s.domain
        ctx = RankingInputs(index, view, parse_budget(f"{int(relevant.sum())}sent"), seed=0)
        scorer, _ = classifier.scorer(ctx, embeddings[s.domain], classifier.make_params())
        lexical = moore_lewis_scores([], s.texts, 0, vocab=vocab, pool_encoded=encoded)
        rows[s.domain] = error_overlap(scorer(index.embeddings), lexical, relevant)
        log.info("%s %s", s.domain, rows[s.domain])
    mean = {k: round(float(np.mean([r[k] for r in rows.values()])), 4)
            for k in next(iter(rows.values())) if k != "oracle"}
    report = {"created": utc_now(), "index": str(args.index), "index_uuid": index.uuid,
              "domains": rows, "mean": mean, "versions": library_versions()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    log.info("mean %s -> %s", mean, args.out)


if __name__ == "__main__":
    main()
