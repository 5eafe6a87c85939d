"""Tokenise once, sort by length, pad per batch: what the fast encoder paths feed their models.

One call of a fast tokenizer over all texts (its Rust batch path), then batches of similar length
padded with numpy, so padding is minimal and nothing is tokenised twice. A batch holds at most
`batch_size` texts and, when `max_tokens` is given, at most that many tokens after padding (rows x
longest row), so short texts go in long batches and long texts in short ones: every batch is a
matrix product of about the same height, whatever the length mix.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def plan_batches(lengths: np.ndarray, batch_size: int, max_tokens: int | None = None
                 ) -> list[np.ndarray]:
    """Row indices of each batch, shortest texts first.

    Args:
        lengths: token count of each text (after truncation).
        batch_size: most texts in a batch.
        max_tokens: most tokens in a batch after padding (rows x longest row); a text longer
            than that is a batch of its own. None: batches of `batch_size` texts.

    Returns:
        One int64 array of row indices per batch; together they cover every row once.
    """
    order = np.argsort(lengths, kind="stable")
    if max_tokens is None:
        return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    widths = np.asarray(lengths)[order]
    out, start, n = [], 0, len(order)
    while start < n:
        # sorted ascending, so the last row of a batch is its widest: grow while it fits
        stop = min(n, start + batch_size)
        fits = (np.arange(1, stop - start + 1) * widths[start:stop]) <= max_tokens
        take = max(1, int(np.argmin(fits)) if not fits.all() else stop - start)
        out.append(order[start:start + take])
        start += take
    return out


def padded_tokens(lengths: np.ndarray, batches: Sequence[np.ndarray]) -> int:
    """Tokens the model computes on for `batches` (rows x longest row, summed)."""
    return int(sum(len(rows) * int(lengths[rows].max()) for rows in batches if len(rows)))


class SortedBatches:
    """Token ids of `texts`, truncated to `max_length`, served as padded length-sorted batches."""

    def __init__(self, tokenizer, texts: Sequence[str], max_length: int, names: Sequence[str]):
        encoded = tokenizer(list(texts), truncation=True, max_length=max_length,
                            add_special_tokens=True)
        self.names = [n for n in names if n in encoded]
        self.lengths = np.fromiter((len(x) for x in encoded["input_ids"]), dtype=np.int64,
                                   count=len(texts))
        self.starts = np.zeros(len(texts), dtype=np.int64)
        np.cumsum(self.lengths[:-1], out=self.starts[1:])
        total = int(self.lengths.sum())
        # one flat array per column: padding a batch is then two vectorised numpy operations
        self.columns = {n: np.fromiter((v for row in encoded[n] for v in row), dtype=np.int64,
                                       count=total) for n in self.names}
        self.pad_id = int(tokenizer.pad_token_id or 0)
        self.left = getattr(tokenizer, "padding_side", "right") == "left"

    def batches(self, batch_size: int, max_tokens: int | None = None) -> list[np.ndarray]:
        """Row indices of each batch, shortest texts first (see `plan_batches`)."""
        return plan_batches(self.lengths, batch_size, max_tokens)

    def features(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """int64 arrays (rows x longest row), padded like the tokenizer would pad them."""
        lengths = self.lengths[rows]
        width = int(lengths.max())
        positions = np.arange(width)
        if self.left:
            shift = (width - lengths)[:, None]
            valid = positions >= shift
            source = self.starts[rows][:, None] + positions - shift
        else:
            valid = positions < lengths[:, None]
            source = self.starts[rows][:, None] + positions
        picked = source[valid]
        out = {}
        for name in self.names:
            fill = self.pad_id if name == "input_ids" else 0
            array = np.full((len(rows), width), fill, dtype=np.int64)
            array[valid] = self.columns[name][picked]
            out[name] = array
        return out
