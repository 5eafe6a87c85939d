"""Precision, recall and F1 of a selection against oracle labels, counted in sentences."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Scores:
    selected: int
    relevant: int
    hits: int

    @property
    def precision(self) -> float:
        return self.hits / self.selected if self.selected else 0.0

    @property
    def recall(self) -> float:
        return self.hits / self.relevant if self.relevant else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    def to_json(self) -> dict:
        return {"selected": self.selected, "relevant": self.relevant, "hits": self.hits,
                "precision": round(self.precision, 4), "recall": round(self.recall, 4),
                "f1": round(self.f1, 4)}


def selection_scores(selected_rows: np.ndarray, relevant: np.ndarray) -> Scores:
    """`selected_rows`: sentence ids selected (duplicates count once); `relevant`: bool per sentence."""
    rows = np.unique(np.asarray(selected_rows, dtype=np.int64))
    relevant = np.asarray(relevant, dtype=bool)
    return Scores(len(rows), int(relevant.sum()), int(relevant[rows].sum()) if len(rows) else 0)
