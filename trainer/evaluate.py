"""Masked-LM loss and pseudo-perplexity on held-out text (`tapt eval-mlm`).

The masks come from a generator seeded per batch from `seed`, so two models that share a tokenizer are
scored on exactly the same masked positions (same text, --seed, --batch-size, --max-length).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np
import torch

from tapt.errors import InputError
from tapt.modeling.mlm import (
    MaskingCollator,
    derived_seed,
    masked_token_losses,
    per_example_sums,
    target_losses,
)
from tapt.trainer.config import MLM_EVAL_BATCH
from tapt.trainer.data import Example
from tapt.util.training import autocast


@dataclass(frozen=True)
class EvalResult:
    """Mean loss (nats per scored token), exp(loss), scored tokens, examples, and the method;
    for the masked-LM loss also each example's summed loss and scored tokens (two models
    scored with the same masks compare example by example)."""

    loss: float
    perplexity: float
    tokens: int
    examples: int
    method: str
    example_loss: Any = field(default=None, repr=False, compare=False)
    example_tokens: Any = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items()
                if k not in ("example_loss", "example_tokens")}


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
    sums = np.zeros(len(examples), dtype=np.float64)
    counts = np.zeros(len(examples), dtype=np.int64)
    try:
        for k in range(0, len(examples), batch_size):
            generator = torch.Generator().manual_seed(derived_seed(seed, k // batch_size, 7919))
            batch = collator(examples[k : k + batch_size], generator)
            with autocast(device):
                token_losses, targets = target_losses(
                    model, batch["input_ids"].to(device), batch["attention_mask"].to(device),
                    batch["labels"].to(device))
            batch_sums, batch_counts = per_example_sums(token_losses.double(), targets)
            sums[k:k + batch_size] = batch_sums.cpu().numpy()
            counts[k:k + batch_size] = batch_counts.cpu().numpy()
    finally:
        model.train(was_training)
    count = int(counts.sum())
    mean = float(sums.sum()) / max(count, 1)
    return EvalResult(mean, _perplexity(mean), count, len(examples), "mlm", sums, counts)


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
    from tapt.modeling.mlm import check_max_length, load_mlm
    from tapt.trainer.config import check_mlm_settings
    from tapt.trainer.data import document_examples
    from tapt.trainer.inputs import read_texts
    from tapt.util.checks import flag, path_list, path_text, shown
    from tapt.util.training import resolve_device

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


def document_losses(model_spec: str, documents: Sequence[Sequence[str]], *, max_length: int,
                    batch_size: int = MLM_EVAL_BATCH, seed: int = 0,
                    mlm_probability: float = 0.15, device: str = "cpu") -> dict[str, Any]:
    """A masked LM's held-out loss on documents, example by example: each document's sentences
    packed into examples as training packs them, every example scored with the masks of
    `mlm_loss` (the same for every model that shares a tokenizer).

    Args:
        model_spec: The masked LM (directory or hub name).
        documents: Each document's sentences.
        max_length: Tokens per example.
        batch_size: Examples per batch (masks are drawn per batch).
        seed: Masking seed.
        mlm_probability: Share of tokens masked.
        device: cpu or cuda.

    Returns:
        loss (nats per masked token), loss_sums and tokens (per example), groups (the document
        number of every example).
    """
    from tapt.modeling.mlm import check_max_length, load_mlm
    from tapt.trainer.data import pack_sentences
    from tapt.util.training import resolve_device

    dev = resolve_device(device)
    torch.manual_seed(seed)
    model, tokenizer, info = load_mlm(model_spec, warn=False)
    check_max_length(model, max_length, info["name"])
    model.to(dev)
    packed = pack_sentences([list(d) for d in documents], tokenizer, max_length)
    examples = [Example(ids, 1.0, "eval") for doc in packed for ids in doc]
    groups = [g for g, doc in enumerate(packed) for _ in doc]
    collator = MaskingCollator(tokenizer, mlm_probability,
                               model.get_input_embeddings().weight.shape[0])
    result = mlm_loss(model, collator, examples, batch_size=batch_size, seed=seed, device=dev)
    return {"loss": result.loss, "loss_sums": result.example_loss.round(5).tolist(),
            "tokens": result.example_tokens.tolist(), "groups": groups}
