"""`python -m tapt.retriever.evaluation.oracle_count IDX FIELD LABEL`: sentences labelled LABEL."""

from __future__ import annotations

import sys

from tapt.indexer.index import Index
from tapt.retriever.evaluation.oracle import sentence_labels

if __name__ == "__main__":
    index_dir, field, label = sys.argv[1:4]
    sys.stdout.write(f"{int((sentence_labels(Index(index_dir), field) == label).sum())}\n")
