"""Selection budgets: a fraction of the corpus's segments, or a count of segments, sentences or tokens.

    0.2         20% of the segments          5000 / 5000seg   5000 segments
    20000sent   20,000 sentences             2Mtok / 500ktok / 1500000tok   tokens
A ranked list is cut at the first segment whose running total reaches the budget (that segment is
included), so a sentence or token budget is met exactly or overshot by less than one segment.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

import numpy as np

from tapt.errors import BudgetError

Unit = Literal["fraction", "segments", "sentences", "tokens"]
_PATTERN = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmg]?)\s*(seg|segs|segments|sent|sents|sentences|tok|tokens)?\s*$", re.I)
_SCALE = {"": 1, "k": 1_000, "m": 1_000_000, "g": 1_000_000_000}
_UNITS: dict[str, Unit] = {"seg": "segments", "segs": "segments", "segments": "segments",
                           "sent": "sentences", "sents": "sentences", "sentences": "sentences",
                           "tok": "tokens", "tokens": "tokens"}


@dataclass(frozen=True)
class Budget:
    spec: str
    unit: Unit
    value: float

    def to_json(self) -> dict:
        return {"spec": self.spec, "unit": self.unit, "value": self.value}


def _short(spec: str) -> str:
    """`spec` quoted for a message, its middle elided when it is very long (10**400)."""
    text = str(spec).strip()
    return repr(text if len(text) <= 40 else f"{text[:20]}...{text[-12:]}")


def parse_budget(spec: str) -> Budget:
    """Parse a budget string; refuses zero, negative, NaN, malformed values and counts below one.

    Raises:
        BudgetError: naming the `budget` parameter.
    """
    match = _PATTERN.match(str(spec))
    if not match:
        raise BudgetError(
            f"{spec!r} not understood: use a fraction (0.2), a segment count (5000), "
            "sentences (20000sent) or tokens (2Mtok)", param="budget"
        )
    number, scale, unit = match.groups()
    value = float(number) * _SCALE[scale.lower()]
    if not math.isfinite(value):    # 1e400, or more digits than a float holds: not "<= 0"
        raise BudgetError(f"{_short(spec)} is too large: give a fraction in (0, 1] or a count "
                          "no larger than the corpus", param="budget")
    if value <= 0:
        tiny = value == 0 and any(c in "123456789" for c in number.lower().split("e")[0])
        raise BudgetError(f"{_short(spec)} is too small: it would select nothing" if tiny
                          else f"{spec!r} must be positive", param="budget")
    if unit is None:
        if "." in number or "e" in number.lower():
            if scale or value > 1:
                whole = (f"; a segment count is a whole number ({int(value)})"
                         if value == int(value) else "")
                raise BudgetError(f"{spec!r}: a number with a decimal point is a fraction of the "
                                  f"corpus and must be in (0, 1]{whole}", param="budget")
            return Budget(str(spec), "fraction", value)
        return Budget(str(spec), "segments", value)
    if unit.lower().startswith("seg") and value != int(value):
        raise BudgetError(f"{spec!r}: a segment count must be whole", param="budget")
    if value < 1:
        raise BudgetError(f"{spec!r} is less than one {_UNITS[unit.lower()][:-1]}: it would "
                          "select nothing", param="budget")
    return Budget(str(spec), _UNITS[unit.lower()], value)


def budget_target(budget: Budget, seg_lengths: np.ndarray, seg_tokens: np.ndarray) -> float:
    """The budget in its own unit, checked against the whole corpus."""
    totals = {"segments": len(seg_lengths), "sentences": float(seg_lengths.sum()),
              "tokens": float(seg_tokens.sum())}
    if budget.unit == "fraction":
        target = round(budget.value * len(seg_lengths))
        if target < 1:
            raise BudgetError(
                f"{budget.spec} of {len(seg_lengths)} segments rounds to none; ask for more than "
                f"{0.5 / max(1, len(seg_lengths)):.2g} or a segment count", param="budget")
        return float(target)
    if budget.value > totals[budget.unit]:
        raise BudgetError(
            f"{budget.spec} is larger than the corpus ({int(totals[budget.unit])} "
            f"{budget.unit})", param="budget"
        )
    return budget.value


def cut(order: np.ndarray, budget: Budget, target: float, seg_lengths: np.ndarray,
        seg_tokens: np.ndarray) -> np.ndarray:
    """The prefix of a ranking that fills the budget (all of it if the ranking is too short)."""
    if budget.unit in ("fraction", "segments"):
        return order[:cut_length(budget.unit, target, order)]
    measure = seg_lengths if budget.unit == "sentences" else seg_tokens
    return order[:cut_length(budget.unit, target, measure[order])]


def cut_length(unit: Unit, target: float, measure: np.ndarray) -> int:
    """How many segments of a ranking a budget keeps: the first `target` for a segment count
    or fraction; for sentences or tokens, up to the first whose running `measure` (each
    ranked segment's sentences or tokens) reaches `target`, that one included."""
    if unit in ("fraction", "segments"):
        return min(int(target), len(measure))
    running = np.cumsum(measure)
    return min(int(np.searchsorted(running, target, side="left")) + 1, len(measure))
