"""Padding and BERT masking: 15% of the maskable tokens become targets; of those 80% are replaced by
the mask token, 10% by a random (non-special) token and 10% left unchanged (Devlin et al., 2019).
Special tokens and padding are never masked. Every example with a maskable token gets at least one
target, so each example has a defined loss (needed for per-example weights).

The code lives in `tapt.retriever.learned.mlm`, shared with the `perplexity` selection method."""

from __future__ import annotations

from tapt.retriever.learned.mlm import IGNORE_INDEX, MaskingCollator, derived_seed

__all__ = ["IGNORE_INDEX", "MaskingCollator", "derived_seed"]
