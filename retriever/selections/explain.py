"""Why a segment was picked (`select(..., explain=True)`): each scorer's part of its score,
its sentences' own score beside its document's pooled one, its nearest task sentences, and a
seeded random sample of the corpus's segment scores to see the budget's cut against.

Only the chosen segments' rows and the sample's are scored again (`Method.explain`, with the
fit the ranking used, kept in the task's `Memo`): the cost grows with the budget, never with
the corpus. A segment's parts are the means over its sentences of each part of their scores
(`fused`: each scorer's z-score, whose sum is the fused score; a scorer method: its own score),
so at sentence context they add up to its score.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from tapt.retriever.methods import RankingInputs
from tapt.retriever.scoring import arrays
from tapt.retriever.selections.file_format import SelectedSegment

SAMPLE = 1000       # random corpus segments whose scores show the distribution
NEAREST = 3         # task sentences named per segment


def explain_segments(ctx: RankingInputs, method: Any, params: Any,
                     segments: list[SelectedSegment], texts: list[str] | None
                     ) -> tuple[list[SelectedSegment], dict[str, Any]]:
    """The segments with their `explain` and the manifest's `explain` entry.

    Args:
        ctx: The selection's ranking inputs (the same `memo` as its ranking).
        method: The registered method.
        params: Its parameters.
        segments: The chosen segments, in rank order.
        texts: The task's sentences, aligned with `ctx.task` (None: no nearest sentences).

    Returns:
        (segments with `explain` set, {"parts", "context", "cut", "sample"}).
    """
    view = ctx.view
    ids = np.asarray([s.id for s in segments], dtype=np.int64)
    lengths = view.lengths[ids] if len(ids) else np.zeros(0, np.int64)
    rows = arrays.rows_of_segments(view.offsets, ids) if len(ids) else np.zeros(0, np.int64)
    parts = {name: _means(values, lengths)
             for name, values in method.explain(ctx, params, rows).items()} if len(ids) else {}
    nearest = _nearest(ctx, rows, lengths, texts)
    document = view.context == "document"
    out = []
    for i, segment in enumerate(segments):
        mine = {name: round(float(values[i]), 6) for name, values in parts.items()}
        why: dict[str, Any] = {"parts": mine}
        if mine:
            why["own"] = round(float(sum(mine.values())), 6)
        if document:
            why["document"] = round(float(segment.score), 6)
        if nearest is not None:
            why["nearest"] = nearest[i]
        out.append(dataclasses.replace(segment, explain=why))
    entry: dict[str, Any] = {"parts": list(parts), "context": view.context,
                             "cut": round(float(segments[-1].score), 6) if segments else None,
                             "sample": _sample(ctx, method, params) if not document else None}
    return out, entry


def _means(values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    return arrays.segment_mean(np.asarray(values, dtype=np.float64), lengths)


def _sample(ctx: RankingInputs, method: Any, params: Any) -> dict[str, Any] | None:
    """Scores of a seeded random sample of the corpus's segments (sentence context: a
    segment's score is the mean of its sentences' summed parts), or None for a method whose
    score has no parts."""
    view = ctx.view
    count = min(SAMPLE, len(view))
    if count == 0:
        return None
    ids = np.sort(np.random.default_rng(ctx.seed).choice(len(view), size=count, replace=False))
    rows = arrays.rows_of_segments(view.offsets, ids)
    parts = method.explain(ctx, params, rows)
    if not parts:
        return None
    total = np.sum([np.asarray(v, dtype=np.float64) for v in parts.values()], axis=0)
    scores = _means(total, view.lengths[ids])
    return {"segments": int(count), "of": int(len(view)),
            "scores": [round(float(s), 6) for s in scores]}


def _nearest(ctx: RankingInputs, rows: np.ndarray, lengths: np.ndarray,
             texts: list[str] | None) -> list[list[dict[str, Any]]] | None:
    """Per segment, its NEAREST task sentences by cosine to the segment's mean embedding."""
    task = ctx.task
    if task is None or texts is None or len(texts) != len(task) or not len(lengths):
        return None
    unique, inverse = np.unique(rows, return_inverse=True)
    vectors = arrays.as_float32(ctx.index.embeddings[unique])[inverse]
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    means = np.add.reduceat(vectors.astype(np.float64), starts, axis=0)
    means /= np.maximum(np.linalg.norm(means, axis=1, keepdims=True), 1e-12)
    cosines = means @ np.asarray(task, dtype=np.float64).T
    k = min(NEAREST, cosines.shape[1])
    best = np.argsort(-cosines, axis=1, kind="stable")[:, :k]
    return [[{"sentence": texts[j], "cosine": round(float(cosines[i, j]), 6)} for j in row]
            for i, row in enumerate(best)]
