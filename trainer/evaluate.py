"""Masked-LM loss and pseudo-perplexity on held-out text (`tapt eval-mlm`).

The masks come from a generator seeded per batch from `seed`, so two models that share a tokenizer are
scored on exactly the same masked positions (same text, --seed, --batch-size, --max-length).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import torch
import torch.nn.functional as F

from tapt.errors import InputError
from tapt.retriever.learned.mlm import masked_token_losses

from .collate import IGNORE_INDEX, MaskingCollator, derived_seed
from .config import MLM_EVAL_BATCH
from .data import Example
from .device import autocast


@dataclass(frozen=True)
class EvalResult:
    """Mean loss (nats per scored token), exp(loss), scored tokens, examples, and the method."""

    loss: float
    perplexity: float
    tokens: int
    examples: int
    method: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _perplexity(loss: float) -> float:
    return math.exp(loss) if loss < 700 else float("inf")


@torch.no_grad()
def mlm_loss(
    model: Any, collator: MaskingCollator, examples: Sequence[Example], *,
    batch_size: int = MLM_EVAL_BATCH, seed: int = 0, device: torch.device | str = "cpu",
) -> EvalResult:
    """Token-level mean cross-entropy over the masked targets of all examples (fixed masks)."""
    if not examples:
        raise InputError("no held-out examples to evaluate")
    device = torch.device(device)
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    try:
        for k in range(0, len(examples), batch_size):
            generator = torch.Generator().manual_seed(derived_seed(seed, k // batch_size, 7919))
            batch = collator(examples[k : k + batch_size], generator)
            labels = batch["labels"].to(device)
            with autocast(device):
                logits = model(input_ids=batch["input_ids"].to(device),
                               attention_mask=batch["attention_mask"].to(device)).logits
            loss = F.cross_entropy(logits.float().transpose(1, 2), labels,
                                   ignore_index=IGNORE_INDEX, reduction="sum")
            total += float(loss)
            count += int((labels != IGNORE_INDEX).sum())
    finally:
        model.train(was_training)
    mean = total / max(count, 1)
    return EvalResult(mean, _perplexity(mean), count, len(examples), "mlm")


@torch.no_grad()
def pseudo_perplexity(
    model: Any, collator: MaskingCollator, examples: Sequence[Example], *,
    batch_size: int = MLM_EVAL_BATCH, device: torch.device | str = "cpu",
) -> EvalResult:
    """Pseudo-log-likelihood scoring (Salazar et al., 2020): each maskable token is masked in turn and
    scored given all the others; costs one forward pass per token, so keep inputs small."""
    if not examples:
        raise InputError("no held-out examples to evaluate")
    copies: list[tuple[tuple[int, ...], int]] = []
    for e in examples:
        ids = torch.tensor(e.input_ids).unsqueeze(0)
        maskable = collator.maskable(ids, torch.ones_like(ids))[0]
        copies.extend((e.input_ids, int(i)) for i in torch.nonzero(maskable).flatten())
    losses = masked_token_losses(model, collator.mask_id, collator.pad_id, copies,
                                 batch_size=batch_size, device=device)
    mean = float(losses.sum()) / max(len(copies), 1)
    return EvalResult(mean, _perplexity(mean), len(copies), len(examples), "pseudo-perplexity")


def evaluate_text(
    model_spec: str | None, paths: Sequence[str], *, max_length: int = 128,
    batch_size: int = MLM_EVAL_BATCH, seed: int = 0, mlm_probability: float = 0.15,
    pseudo: bool = False, device: str = "cpu", text_field: str = "text",
    strings: Sequence[str] = (),
) -> dict[str, Any]:
    """Load a model and score held-out text files; the dict is what `tapt eval-mlm --json` prints.

    The text is read like a corpus (any corpus format, "-" for standard input; `text_field`
    names the field/column with the text) and split into sentences by the corpus splitter;
    or given as `strings` (one document each, as `tapt.train`'s held-out text).
    """
    from .data import document_examples
    from .device import resolve_device
    from .model import check_max_length, load_mlm
    from .inputs import read_texts

    from tapt.util.checks import flag, path_list, path_text, shown

    from .config import check_mlm_settings

    check_mlm_settings(max_length, batch_size, mlm_probability, seed, device)
    flag(pseudo, "pseudo")
    if not isinstance(text_field, str) or not text_field:
        raise InputError(f"must name a field or column, got {shown(text_field)}",
                         param="text_field")
    if model_spec is not None:
        model_spec = path_text(model_spec, "model")
    paths = list(path_list(paths, "texts"))
    if not paths and not strings:
        raise InputError("give at least one file, folder or URL of held-out text", param="texts")
    max_length, batch_size, seed = int(max_length), int(batch_size), int(seed)
    mlm_probability = float(mlm_probability)
    dev = resolve_device(device)
    text = read_texts(paths, list(strings), text_field, "held-out text", "texts")
    torch.manual_seed(seed)
    model, tokenizer, info = load_mlm(model_spec)
    check_max_length(model, max_length, info["name"])
    model.to(dev)
    collator = MaskingCollator(tokenizer, mlm_probability, model.get_input_embeddings().weight.shape[0])
    examples = document_examples(text.documents, tokenizer, max_length, source="eval")
    if pseudo:
        result = pseudo_perplexity(model, collator, examples, batch_size=batch_size, device=dev)
    else:
        result = mlm_loss(model, collator, examples, batch_size=batch_size, seed=seed, device=dev)
    return {
        "model": info["name"],
        "head_initialised": info["head_initialised"],
        "text": text.files,
        "max_length": max_length,
        "batch_size": batch_size,
        "seed": seed,
        "mlm_probability": mlm_probability,
        **result.to_dict(),
    }
