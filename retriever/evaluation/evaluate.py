"""Score selection files against an index's oracle labels."""

from __future__ import annotations

from typing import Any

import numpy as np

from tapt.errors import InputError
from tapt.indexer.index import Index
from tapt.retriever.evaluation.metrics import selection_scores
from tapt.retriever.evaluation.oracle import most_frequent, sentence_labels
from tapt.retriever.selections.file_format import checked_selection
from tapt.util.checks import did_you_mean


def evaluate_selections(paths: list[str], index: str | Index, label_field: str,
                        label: str) -> list[dict[str, Any]]:
    """One row per selection: method, counts, precision/recall/F1 and the selection's time
    (`index`: the index or its directory)."""
    index = index if isinstance(index, Index) else Index(index)
    labels = sentence_labels(index, label_field)
    relevant = labels == label
    if not relevant.any():
        raise InputError(f"no sentence of the index has {label_field} = {label!r}"
                         f"{did_you_mean(label, set(labels.tolist()), value=True)}; "
                         f"{most_frequent(labels)}", param="label")
    rows = []
    for path in paths:
        with checked_selection(path) as (manifest, segments):
            index.check_selection(path, manifest.get("index"))
            parts = [np.arange(*seg.rows) for seg in segments]
        selected = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
        if len(selected) and (selected.min() < 0 or selected.max() >= index.n_sentences):
            # a manifest rewritten by hand to match edited rows: not rows of this index
            raise InputError(f"selection {path} names rows outside the index's "
                             f"{index.n_sentences:,} sentences (edited?); make it again")
        scores = selection_scores(selected, relevant)
        rows.append({"selection": path, "method": manifest["method"],
                     "segments": manifest["counts"]["segments"], **scores.to_json(),
                     "seconds": manifest["timings"]["total_seconds"]})
    return rows
