"""Padding and BERT masking: 15% of the maskable tokens become targets; of those 80% are replaced by
the mask token, 10% by a random (non-special) token and 10% left unchanged (Devlin et al., 2019).
Special tokens and padding are never masked. Every example with a maskable token gets at least one
target, so each example has a defined loss (needed for per-example weights)."""

from __future__ import annotations

from typing import Any, Sequence

import torch

from tapt.errors import InputError

from .data import Example

IGNORE_INDEX = -100


def derived_seed(*parts: int) -> int:
    """A 63-bit seed derived from integers (e.g. run seed and step), stable across runs."""
    import numpy as np

    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(2, np.uint64)[0] >> 1)


class MaskingCollator:
    """Turns examples into a padded, masked batch with a caller-supplied torch.Generator."""

    def __init__(self, tokenizer: Any, mlm_probability: float = 0.15, vocab_size: int | None = None):
        if tokenizer.mask_token_id is None:
            raise InputError("the tokenizer has no mask token, so it cannot be used for masked-LM")
        if tokenizer.pad_token_id is None:
            raise InputError("the tokenizer has no padding token")
        self.mask_id = int(tokenizer.mask_token_id)
        self.pad_id = int(tokenizer.pad_token_id)
        self.special_ids = torch.tensor(sorted(set(int(i) for i in tokenizer.all_special_ids)))
        size = int(vocab_size if vocab_size is not None else len(tokenizer))
        candidates = torch.ones(size, dtype=torch.bool)
        candidates[self.special_ids[self.special_ids < size]] = False
        self.replacement_ids = torch.nonzero(candidates).flatten()
        self.mlm_probability = float(mlm_probability)

    def pad(self, examples: Sequence[Example]) -> tuple[torch.Tensor, torch.Tensor]:
        """(input_ids, attention_mask), right-padded to the longest example."""
        width = max(len(e.input_ids) for e in examples)
        ids = torch.full((len(examples), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(examples), width), dtype=torch.long)
        for row, e in enumerate(examples):
            ids[row, : len(e.input_ids)] = torch.tensor(e.input_ids, dtype=torch.long)
            attention[row, : len(e.input_ids)] = 1
        return ids, attention

    def maskable(self, ids: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
        """True where a token may be masked: real tokens that are not special tokens."""
        return attention.bool() & ~torch.isin(ids, self.special_ids)

    def mask(
        self, ids: torch.Tensor, maskable: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(masked inputs, labels): labels hold the original id at targets and -100 elsewhere."""
        draw = torch.rand(ids.shape, generator=generator)
        targets = (draw < self.mlm_probability) & maskable
        # At least one target per example that has any maskable token.
        empty = ~targets.any(dim=1) & maskable.any(dim=1)
        if empty.any():
            pick = torch.where(maskable, draw, torch.full_like(draw, 2.0)).argmin(dim=1)
            targets[empty, pick[empty]] = True
        labels = torch.where(targets, ids, torch.full_like(ids, IGNORE_INDEX))
        action = torch.rand(ids.shape, generator=generator)
        random_ids = self.replacement_ids[
            torch.randint(len(self.replacement_ids), ids.shape, generator=generator)
        ]
        inputs = ids.clone()
        inputs[targets & (action < 0.8)] = self.mask_id
        use_random = targets & (action >= 0.8) & (action < 0.9)
        inputs[use_random] = random_ids[use_random]
        return inputs, labels

    def __call__(
        self, examples: Sequence[Example], generator: torch.Generator
    ) -> dict[str, torch.Tensor]:
        """A batch: input_ids, attention_mask, labels and per-example weights (float32)."""
        ids, attention = self.pad(examples)
        inputs, labels = self.mask(ids, self.maskable(ids, attention), generator)
        weights = torch.tensor([e.weight for e in examples], dtype=torch.float32)
        return {"input_ids": inputs, "attention_mask": attention, "labels": labels, "weights": weights}
