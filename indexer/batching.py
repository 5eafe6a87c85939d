"""Tokenise once, sort by length, pad per batch: what the fast encoder paths feed their models.

One call of a fast tokenizer over all texts (its Rust batch path), then batches of similar length
padded with numpy, so padding is minimal and nothing is tokenised twice.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


class SortedBatches:
    """Token ids of `texts`, truncated to `max_length`, served as padded length-sorted batches."""

    def __init__(self, tokenizer, texts: Sequence[str], max_length: int, names: Sequence[str]):
        encoded = tokenizer(list(texts), truncation=True, max_length=max_length,
                            add_special_tokens=True)
        self.names = [n for n in names if n in encoded]
        self.columns = {n: encoded[n] for n in self.names}
        self.lengths = np.fromiter((len(x) for x in encoded["input_ids"]), dtype=np.int64,
                                   count=len(texts))
        self.order = np.argsort(self.lengths, kind="stable")
        self.pad_id = int(tokenizer.pad_token_id or 0)
        self.left = getattr(tokenizer, "padding_side", "right") == "left"

    def batches(self, batch_size: int) -> list[np.ndarray]:
        """Row indices of each batch, shortest texts first."""
        return [self.order[i:i + batch_size] for i in range(0, len(self.order), batch_size)]

    def features(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """int64 arrays (rows x longest row), padded like the tokenizer would pad them."""
        width = int(self.lengths[rows].max())
        out = {}
        for name in self.names:
            fill = self.pad_id if name == "input_ids" else 0
            array = np.full((len(rows), width), fill, dtype=np.int64)
            for r, j in enumerate(rows):
                values = self.columns[name][j]
                if self.left:
                    array[r, width - len(values):] = values
                else:
                    array[r, :len(values)] = values
            out[name] = array
        return out
