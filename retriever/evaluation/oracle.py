"""Oracle labels: a metadata field of every stored sentence (e.g. `domain` of a labelled pool)."""

from __future__ import annotations

import numpy as np
from tqdm.auto import tqdm

from tapt.errors import InputError
from tapt.indexer.index import Index

_BLOCK = 50_000


def most_frequent(labels: np.ndarray, shown: int = 8) -> str:
    """"its values, most frequent first: medical (1,203), legal (800), ... (7 values)": what a
    message about a label that does not occur says of those that do ('' is no label)."""
    values, counts = np.unique(labels[labels != ""], return_counts=True)
    order = np.argsort(-counts, kind="stable")[:shown]
    listed = ", ".join(f"{values[i]} ({counts[i]:,})" for i in order)
    more = f", ... ({len(values):,} values)" if len(values) > shown else ""
    return f"its values, most frequent first: {listed}{more}" if len(values) else "it has none"


def sentence_labels(index: Index, field: str, progress: bool = False) -> np.ndarray:
    """The `meta[field]` value of every sentence as strings ('' where missing)."""
    out = np.empty(index.n_sentences, dtype=object)
    seen = False
    for start in tqdm(range(0, index.n_sentences, _BLOCK), desc="labels", disable=not progress):
        records = index.store.records(range(start, min(start + _BLOCK, index.n_sentences)))
        for offset, record in enumerate(records):
            value = record.get("meta", {}).get(field)
            seen = seen or value is not None
            out[start + offset] = "" if value is None else str(value)
    if not seen:
        raise InputError(f"no sentence of index {index.path} has a '{field}' field")
    return out
