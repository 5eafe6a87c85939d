"""The statistics of `tapt bench downstream`: paired differences between conditions with 95%
bootstrap intervals, and the share of the oracle's gain a method recovers.

Every condition is scored on the same examples with the same folds for a seed, so conditions
are compared example by example. The intervals come from a two-level bootstrap: each draw
resamples the seeds (the runs: selection, continued pretraining and fine-tuning randomness) and,
independently, the groups of the labelled set (documents, whose examples are not independent),
both with replacement, and recomputes every condition's accuracy (or held-out loss) on that
draw; a difference's interval is the 2.5 and 97.5 percentiles of its draws, and so is a ratio's
(the oracle share), computed draw by draw.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

DRAWS = 10_000
_CHUNK = 1_000


@dataclass(frozen=True)
class Resampled:
    """Every condition's statistic on every bootstrap draw, and on the data as it is.

    Attributes:
        point: Condition -> the statistic on all seeds and groups.
        draws: Condition -> [DRAWS] the statistic on each draw (the same draws for all).
    """

    point: dict[str, float]
    draws: dict[str, np.ndarray]


def group_totals(values: np.ndarray, group_of: np.ndarray, n_groups: int) -> np.ndarray:
    """Per-seed sums over each group's examples.

    Args:
        values: [seeds, examples] (correct answers, loss sums or token counts).
        group_of: [examples] each example's group number.
        n_groups: How many groups.

    Returns:
        [seeds, groups] sums.
    """
    values = np.atleast_2d(np.asarray(values, dtype=np.float64))
    out = np.zeros((values.shape[0], n_groups), dtype=np.float64)
    for s in range(values.shape[0]):
        out[s] = np.bincount(group_of, weights=values[s], minlength=n_groups)
    return out


def resample_ratio(numerators: Mapping[str, np.ndarray], denominators: Mapping[str, np.ndarray],
                   *, draws: int = DRAWS, seed: int = 0) -> Resampled:
    """A ratio of sums (accuracy: correct / examples; loss: loss / tokens) per condition, on the
    data and on two-level bootstrap draws over seeds and groups.

    Args:
        numerators: Condition -> [seeds, groups] numerator sums (`group_totals`).
        denominators: Condition -> [seeds, groups] denominator sums.
        draws: Bootstrap draws.
        seed: Seed of the draws.

    Returns:
        The statistic of every condition on the data and on each draw.
    """
    names = list(numerators)
    n_seeds, n_groups = next(iter(numerators.values())).shape
    point = {c: float(numerators[c].sum() / denominators[c].sum()) for c in names}
    rng = np.random.default_rng([seed, 97])
    out = {c: np.empty(draws, dtype=np.float64) for c in names}
    for start in range(0, draws, _CHUNK):
        k = min(_CHUNK, draws - start)
        seeds_w = rng.multinomial(n_seeds, np.full(n_seeds, 1.0 / n_seeds), size=k)
        groups_w = rng.multinomial(n_groups, np.full(n_groups, 1.0 / n_groups), size=k)
        for c in names:
            num = np.einsum("ds,sg,dg->d", seeds_w, numerators[c], groups_w)
            den = np.einsum("ds,sg,dg->d", seeds_w, denominators[c], groups_w)
            with np.errstate(invalid="ignore", divide="ignore"):
                out[c][start:start + k] = num / den
    return Resampled(point, out)


def interval(values: np.ndarray) -> tuple[float, float]:
    """The 95% percentile interval of finite draws (NaN, NaN when there are none)."""
    finite = values[np.isfinite(values)]
    if not len(finite):
        return float("nan"), float("nan")
    low, high = np.percentile(finite, [2.5, 97.5])
    return float(low), float(high)


def difference(resampled: Resampled, condition: str, reference: str) -> dict[str, float]:
    """A condition's paired difference from a reference, with its 95% interval.

    Args:
        resampled: `resample_ratio`'s result.
        condition: The condition.
        reference: The one it is compared with.

    Returns:
        delta, ci_low, ci_high.
    """
    delta = resampled.point[condition] - resampled.point[reference]
    low, high = interval(resampled.draws[condition] - resampled.draws[reference])
    return {"delta": delta, "ci_low": low, "ci_high": high}


def oracle_share(resampled: Resampled, condition: str, reference: str = "random",
                 oracle: str = "oracle") -> dict[str, float]:
    """The share of the oracle's gain over `reference` that `condition` recovers:
    (condition - reference) / (oracle - reference), on the data and draw by draw.

    Args:
        resampled: `resample_ratio`'s result.
        condition: The method.
        reference: The control (random).
        oracle: The oracle condition.

    Returns:
        share, share_ci_low, share_ci_high (NaN where the oracle gains nothing on the data),
        and resolved_draws: the share of draws where the oracle gained anything.
    """
    p, d = resampled.point, resampled.draws
    gain = p[oracle] - p[reference]
    share = (p[condition] - p[reference]) / gain if gain > 0 else float("nan")
    gains = d[oracle] - d[reference]
    with np.errstate(invalid="ignore", divide="ignore"):
        shares = np.where(gains > 0, (d[condition] - d[reference]) / gains, np.nan)
    low, high = interval(shares)
    return {"share": share, "share_ci_low": low, "share_ci_high": high,
            "resolved_draws": float(np.mean(gains > 0))}


def per_fold_differences(correct: Mapping[str, np.ndarray], fold_of: Sequence[np.ndarray],
                         condition: str, reference: str) -> list[list[float]]:
    """Accuracy of `condition` minus `reference` in every fold of every seed.

    Args:
        correct: Condition -> [seeds, examples] 0/1.
        fold_of: Per seed, each example's fold.
        condition: The condition.
        reference: The one it is compared with.

    Returns:
        [seed][fold] differences.
    """
    out = []
    for s, folds in enumerate(fold_of):
        row = []
        for f in range(int(np.max(folds)) + 1):
            rows = folds == f
            row.append(round(float(correct[condition][s, rows].mean()
                                   - correct[reference][s, rows].mean()), 4))
        out.append(row)
    return out
