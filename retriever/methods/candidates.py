"""What a method that rescores a cheap pre-ranking's candidates is made of (`iforest`,
`task-model`, the tuned encoder of `centroid` and `density`): the `candidates` spec, the pool it
gives, and `RescoresCandidates`, the `prerank` half such a method shares."""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from tapt.errors import InputError
from tapt.retriever.methods.base import Method, Params
from tapt.retriever.methods.ranking_inputs import RankingInputs
from tapt.retriever.methods.registry import get_method
from tapt.retriever.ranking.budget import budget_target, cut_length


def parse_candidates(spec: str) -> tuple[Literal["all", "times", "count"], float]:
    """'10x' -> ('times', 10.0), '500' -> ('count', 500.0), 'all' -> ('all', 0.0)."""
    spec = str(spec).strip().lower()
    try:
        if spec == "all":
            return "all", 0.0
        if spec.endswith("x"):
            value = float(spec[:-1])
            kind: Literal["times", "count"] = "times"
        else:
            value = float(int(spec))
            kind = "count"
    except ValueError as exc:
        raise InputError(f"{spec!r}: use 10x, a segment count, or all",
                         param="candidates") from exc
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"{spec!r} must be positive", param="candidates")
    return kind, value


def candidate_pool(ctx, pre_method: Method | None, pre_params: Params | None,
                   spec: str) -> np.ndarray:
    """The candidate segments a rescoring method takes from a pre-ranking, best first.

    Args:
        ctx: The selection's `RankingInputs` (a `times` spec needs its budget).
        pre_method: The pre-ranking method (unused for `all`).
        pre_params: Its parameters.
        spec: `candidates`: a multiple of the budget ("10x"), a segment count, or "all".

    Returns:
        Segment ids: for a multiple, the pre-ranking's shortest prefix that holds it.
    """
    view, budget = ctx.view, ctx.budget
    kind, value = parse_candidates(spec)
    if kind == "all":
        return np.arange(len(view))
    if kind == "times":    # the segments the budget holds, counted in index order
        if budget is None:
            raise InputError("a candidates multiple needs a budget", param="candidates")
        wanted = cut_length(budget.unit, budget_target(budget, view.lengths, view.tokens),
                            view.tokens if budget.unit == "tokens" else view.lengths)
        return holding_budget(ctx, pre_method, pre_params, int(math.ceil(value * wanted)),
                              value)
    return pre_method.top_segments(ctx, pre_params, int(value))


def holding_budget(ctx: RankingInputs, pre_method: Method, pre_params: Params, size: int,
                   times: float) -> np.ndarray:
    """`times` x the budget of candidates from the pre-ranking: its first `size` segments
    for a budget in segments, else its shortest prefix that holds `times` x the budget's
    sentences or tokens (the pre-ranking's top segments are often shorter or longer than
    the index's average, which `size` assumes)."""
    view, budget = ctx.view, ctx.budget
    pool = pre_method.top_segments(ctx, pre_params, size)
    if budget.unit not in ("sentences", "tokens"):
        return pool
    measure = np.asarray(view.tokens if budget.unit == "tokens" else view.lengths)
    want = times * budget_target(budget, view.lengths, view.tokens)
    while len(pool) == size < len(view) and measure[pool].sum() < want:
        held = max(float(measure[pool].sum()), 1.0)
        size = min(len(view), max(size + 1, int(math.ceil(1.25 * size * want / held))))
        pool = pre_method.top_segments(ctx, pre_params, size)
    return pool[:cut_length(budget.unit, want, measure[pool])]


class RescoresCandidates(Method):
    """A method whose `candidates` (a `candidate_pool` spec) come from the `prerank` method;
    with candidates `all` there is no pre-ranking."""

    def _prerank(self, params: Params) -> Method | None:
        if parse_candidates(params.candidates)[0] == "all":
            return None
        return get_method(params.prerank)

    def uses_text(self, params: Params) -> bool:
        pre = self._prerank(params)
        return pre is not None and pre.uses_text(pre.shared_params(params))
