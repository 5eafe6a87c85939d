"""`auto` over every method: the held-out protocol's choice among single scorers, `fused` and the
learned fusion (and Domain-Finetune when it is run), with the table that says why.

The evidence is the cross-fitted held-out features of `fusion.cross_fitted_features`: every task
sentence scored by scorers fitted without it, against a random corpus sample scored by the same
fold's scorers. A method's held-out score is its ROC AUC on these points (task vs corpus; the
corpus sample's own task-like rows lower every method alike); the break-even F1 of TADPOLE's
protocol is reported beside it. `fused` is the equal-weight sum of classifier and Moore-Lewis;
`fused-learned` is scored by nested cross-validation (its weights fitted on the other folds'
points), so the fitted method is not judged on the points it was fitted to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from tapt.retriever.learned.fusion import fit_weights
from tapt.retriever.learned.heldout import auc, break_even_f1


@dataclass
class AutoChoice:
    """The chosen method and every candidate's held-out AUC and F1, best first."""

    chosen: str
    table: list[dict]

    def to_json(self) -> dict:
        return {"chosen": self.chosen, "heldout": self.table}


def _f1(scores: np.ndarray, is_task: np.ndarray) -> float:
    """Break-even F1 on a balanced subset: every task point and an equal share of the corpus."""
    pos = np.flatnonzero(is_task)
    neg = np.flatnonzero(~is_task)
    neg = neg[np.linspace(0, len(neg) - 1, min(len(neg), len(pos))).astype(int)]
    keep = np.concatenate([pos, neg])
    return break_even_f1(scores[keep], is_task[keep])


def nested_learned_scores(x: np.ndarray, y: np.ndarray, fold_of: np.ndarray,
                          names: Sequence[str], inputs: Sequence[str], seed: int = 0
                          ) -> np.ndarray:
    """Learned-fusion scores of every point with weights fitted on the other folds' points."""
    cols = [list(names).index(n) for n in inputs]
    out = np.zeros(len(y))
    for f in np.unique(fold_of):
        test = fold_of == f
        w = fit_weights(x[~test][:, cols], y[~test], list(inputs), seed=seed)
        out[test] = x[test][:, cols] @ np.array([w[n] for n in inputs])
    return out


def choose(x: np.ndarray, y: np.ndarray, fold_of: np.ndarray, names: Sequence[str],
           fused_inputs: Sequence[str] = ("classifier", "moore-lewis"),
           learned_inputs: Sequence[str] | None = ("classifier", "moore-lewis", "density"),
           extra: dict[str, tuple[np.ndarray, np.ndarray]] | None = None,
           seed: int = 0) -> AutoChoice:
    """Rank every method by held-out AUC (then F1, then name).

    Args:
        x: Cross-fitted standardised scores, one column per name in `names`.
        y: True for held-out task sentences, False for corpus-sample points.
        fold_of: The fold each point was scored in (corpus points once per fold).
        names: The scorers of the columns.
        fused_inputs: The scorers of `fused` (equal weights); omitted when one is missing.
        learned_inputs: The scorers of the learned fusion; None to leave it out.
        extra: Other methods scored on held-out points of their own: name -> (scores, is_task).
        seed: Seed of the nested fits.

    Returns:
        The choice and its table.
    """
    candidates: dict[str, tuple[np.ndarray, np.ndarray]] = {
        name: (x[:, j], y) for j, name in enumerate(names)}
    if all(n in names for n in fused_inputs):
        candidates["fused"] = (x[:, [list(names).index(n) for n in fused_inputs]].sum(axis=1), y)
    if learned_inputs and all(n in names for n in learned_inputs):
        candidates["fused-learned"] = (
            nested_learned_scores(x, y, fold_of, names, learned_inputs, seed), y)
    candidates.update(extra or {})
    table = [{"name": name, "auc": round(auc(s, t), 4), "f1": round(_f1(s, t), 4)}
             for name, (s, t) in candidates.items()]
    table.sort(key=lambda r: (-r["auc"], -r["f1"], r["name"]))
    return AutoChoice(table[0]["name"], table)
