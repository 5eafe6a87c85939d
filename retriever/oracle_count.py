"""`python -m retriever.oracle_count IDX FIELD LABEL`: how many sentences carry LABEL (for budgets)."""

from __future__ import annotations

import sys

from tapt.indexer.index import Index

from .oracle import sentence_labels

if __name__ == "__main__":
    index_dir, field, label = sys.argv[1:4]
    sys.stdout.write(f"{int((sentence_labels(Index(index_dir), field) == label).sum())}\n")
