"""An encoder with mean pooling and a linear head: the module Domain-Finetune trains as a domain
classifier (one output: the log-odds of "task") and the downstream benchmark fine-tunes on a
labelled task (one output per label).

The encoder is loaded with `AutoModel` (a masked LM's checkpoint gives its encoder; its output
head is not needed), kept in float32; the head is initialised from torch's global generator
(seed it first: the same seed gives the same head).
"""

from __future__ import annotations

import logging
import re
from typing import Any, Sequence

import numpy as np

from tapt.errors import InputError

log = logging.getLogger(__name__)

FEATURES = ("input_ids", "attention_mask", "token_type_ids")
_LAYER = re.compile(r"(?:^|\.)layers?\.(\d+)\.")


def encoder_classifier(encoder: Any, outputs: int) -> Any:
    """A torch module: `encoder`, mean pooling over the attended tokens, `Linear(hidden,
    outputs)` as `.head`; its forward returns [B] logits for one output, [B, outputs] else.

    Args:
        encoder: A transformers encoder (`last_hidden_state`, `config.hidden_size`).
        outputs: Outputs of the head (1 for a binary classifier's log-odds).

    Returns:
        The module (built here so that torch is imported only when a classifier is).
    """
    import torch

    class EncoderClassifier(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = encoder
            self.head = torch.nn.Linear(encoder.config.hidden_size, outputs)

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
            if token_type_ids is not None:
                kwargs["token_type_ids"] = token_type_ids
            hidden = self.encoder(**kwargs).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
            logits = self.head(pooled)
            return logits.squeeze(-1) if outputs == 1 else logits

    return EncoderClassifier()


def load_classifier(spec: str | None, outputs: int = 1) -> tuple[Any, Any, str]:
    """(classifier with a fresh head, tokenizer, SHA-256 of the encoder's weights) for a model
    argument (a directory, the packaged default, a hub name).

    Args:
        spec: The model argument.
        outputs: Outputs of the head.

    Returns:
        The module, its tokenizer and the weights' fingerprint.

    Raises:
        InputError: a model that cannot be loaded, without a padding token, or not an encoder.
    """
    from transformers import AutoModel, AutoTokenizer

    from tapt.indexer.encoding.encoder import _state_sha256
    from tapt.indexer.encoding.models import display_name, load_failure, resolve_model
    from tapt.util.training import quiet_transformers

    path = resolve_model(spec)
    name = display_name(spec)
    try:
        with quiet_transformers():
            tokenizer = AutoTokenizer.from_pretrained(path)
            encoder = AutoModel.from_pretrained(path)
    except (OSError, ValueError, KeyError, RuntimeError, TypeError) as exc:
        raise InputError(load_failure(spec, "cannot load model", exc), param="model") from exc
    if getattr(tokenizer, "pad_token_id", None) is None:
        raise InputError(f"the tokenizer of {name} has no padding token", param="model")
    if not hasattr(encoder.config, "hidden_size"):
        raise InputError(f"model {name} is not a transformer encoder", param="model")
    encoder = encoder.float()
    return encoder_classifier(encoder, outputs), tokenizer, _state_sha256(encoder)


def freeze_below(model: Any, train_layers: int) -> int:
    """Freeze every encoder parameter but those of the top `train_layers` numbered transformer
    layers (0: train everything); the head always trains.

    Args:
        model: An `encoder_classifier` module.
        train_layers: Top layers to train (0 = all).

    Returns:
        The number of trainable tensors.
    """
    if train_layers:
        layer_of = {name: int(m.group(1)) for name, _ in model.encoder.named_parameters()
                    if (m := _LAYER.search(name))}
        if layer_of:
            top = max(layer_of.values())
            for name, param in model.encoder.named_parameters():
                param.requires_grad_(layer_of.get(name, -1) > top - train_layers)
        else:
            log.warning("the model's layers are not numbered: all of them are trained")
    return sum(1 for p in model.parameters() if p.requires_grad)


class TokenizedTexts:
    """Texts tokenised once (`indexer.encoding.batching.SortedBatches`); padded batches of any
    rows as tensors on a device, and length-sorted batches for scoring."""

    def __init__(self, tokenizer: Any, texts: Sequence[str], max_length: int) -> None:
        from tapt.indexer.encoding.batching import SortedBatches

        self.sorted = SortedBatches(tokenizer, list(texts), max_length, FEATURES)

    def batch(self, rows: np.ndarray, device: Any) -> dict[str, Any]:
        """The padded features of `rows` on `device`."""
        import torch

        return {k: torch.from_numpy(v).to(device) for k, v in self.sorted.features(rows).items()}

    def batches(self, size: int) -> list[np.ndarray]:
        """Rows in length-sorted batches of at most `size` (little padding)."""
        return self.sorted.batches(size)
