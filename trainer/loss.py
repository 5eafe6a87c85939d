"""Per-example masked-LM loss and its weighted batch mean.

loss_i = mean cross-entropy over example i's masked tokens; batch loss = (1/B) * sum_i w_i * loss_i.
With `--weights continuous`, w_i is the segment's lambda (TADPOLE eq. 1: the MLM loss of each selected
example scaled by its weight); otherwise w_i = 1, i.e. the plain mean of per-example losses. We divide by
B rather than sum(w_i) so that a batch of low-weight examples moves the model less, which is what the
weight is for; the effective learning rate on the selection is therefore scaled by the mean lambda.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .collate import IGNORE_INDEX


def per_example_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """[B] mean cross-entropy over each example's targets (0 for an example without targets)."""
    token_loss = F.cross_entropy(
        logits.float().transpose(1, 2), labels, ignore_index=IGNORE_INDEX, reduction="none"
    )
    counts = (labels != IGNORE_INDEX).sum(dim=1)
    return token_loss.sum(dim=1) / counts.clamp(min=1)


def weighted_mlm_loss(
    logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """Scalar: mean over the batch of w_i * loss_i (w_i = 1 when `weights` is None)."""
    losses = per_example_loss(logits, labels)
    if weights is not None:
        losses = losses * weights.to(losses.device, losses.dtype)
    return losses.mean()
