"""The masked-LM core that `tapt train`, `tapt pretrain`, `tapt eval-mlm` and the `perplexity`
selection method share: loading a masked LM and its tokenizer, BERT masking, and scoring masked
tokens.

Loading: from a local directory, the packaged default or a hub name. The packaged default
(all-MiniLM-L6-v2) is a sentence-transformers directory whose config is a plain `BertModel`:
`AutoModelForMaskedLM` then builds a `BertForMaskedLM` whose prediction head (transform dense +
LayerNorm + output bias) is newly initialised. As in BERT, the output decoder is tied to the word
embeddings, so the head starts from the pretrained vocabulary matrix and only the small transform
is random; a few hundred steps of MLM training on generic text warm it up.

Masking: 15% of the maskable tokens become targets; of those 80% are replaced by the mask token,
10% by a random (non-special) token and 10% left unchanged (Devlin et al., 2019). Special tokens
and padding are never masked. Every example with a maskable token gets at least one target, so
each example has a defined loss (needed for per-example weights).

Scoring (`masked_token_losses`): the pseudo-log-likelihood terms of Salazar et al. (2020), one
masked copy of a sequence per scored position, each copy one row of a batch.

torch and transformers are imported where they are used.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from tapt.errors import InputError
from tapt.indexer.encoding.models import display_name, load_failure, resolve_model
from tapt.util.training import autocast, quiet_transformers

logger = logging.getLogger(__name__)

TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json")


def _looks_like_path(spec: str) -> bool:
    """A user argument meant as a directory (hub names are 'name' or 'owner/name')."""
    return spec.startswith((".", "/", "~")) or spec.count("/") > 1 or "\\" in spec


def _masked_lm_types() -> set[str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    return set(MODEL_FOR_MASKED_LM_MAPPING_NAMES)


def load_tokenizer(path: str, name: str) -> Any:
    """The tokenizer of a model; it must exist and have a mask token."""
    from transformers import AutoTokenizer

    try:
        with quiet_transformers():
            tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise InputError(f"model {name} has no usable tokenizer: {str(exc).splitlines()[0]}") from exc
    if getattr(tokenizer, "mask_token_id", None) is None:
        raise InputError(f"the tokenizer of {name} has no mask token; it cannot train a masked LM")
    if getattr(tokenizer, "pad_token_id", None) is None:
        raise InputError(f"the tokenizer of {name} has no padding token")
    if len(tokenizer) <= len(set(tokenizer.all_special_ids)) + 1:
        raise InputError(f"the tokenizer of {name} has no vocabulary")
    return tokenizer


def _tie_head(model: Any) -> bool:
    """Tie the output decoder to the input embeddings (as BERT does); True when they are tied."""
    out, inp = model.get_output_embeddings(), model.get_input_embeddings()
    if out is None or inp is None:
        return False
    tie = getattr(model.config, "tie_word_embeddings", True) is not False
    if tie and out.weight is not inp.weight and out.weight.shape == inp.weight.shape:
        out.weight = inp.weight
    return out.weight is inp.weight


def load_mlm(spec: str | None, warn: bool = True) -> tuple[Any, Any, dict[str, Any]]:
    """(model, tokenizer, info) for a model argument; info has `name`, `path`, `head_initialised`
    and `warnings`.

    Refuses a directory without config, weights or tokenizer, and an architecture that has no
    masked-LM head in transformers (e.g. GPT-2). A base encoder without head weights is accepted with a
    warning: its head is initialised (call `torch.manual_seed` first for a reproducible head).
    With `warn` False the warning is only in `info["warnings"]`, for the caller to log once its
    own refusals are past.
    """
    from transformers import AutoConfig, AutoModelForMaskedLM

    if spec is not None and not Path(spec).expanduser().exists() and _looks_like_path(spec):
        raise InputError(f"model directory {spec} does not exist")
    path = resolve_model(spec)
    name = display_name(spec)
    local = Path(path)
    if local.exists():
        if not (local / "config.json").is_file():
            raise InputError(f"model directory {path} has no config.json (not a transformers model)")
        if not any((local / f).is_file() for f in TOKENIZER_FILES) and not list(local.glob("*.model")):
            raise InputError(f"model directory {path} has no tokenizer files ({', '.join(TOKENIZER_FILES)})")
    try:
        with quiet_transformers():
            config = AutoConfig.from_pretrained(path)
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(load_failure(spec, "cannot load the config of model", exc)) from exc
    if config.model_type not in _masked_lm_types():
        archs = ", ".join(getattr(config, "architectures", None) or [config.model_type])
        raise InputError(
            f"model {name} ({archs}) is not a masked-LM architecture; use an encoder such as "
            f"BERT, RoBERTa or DistilBERT"
        )
    tokenizer = load_tokenizer(path, name)
    try:
        with quiet_transformers():
            model, loading = AutoModelForMaskedLM.from_pretrained(path, output_loading_info=True)
    except (OSError, ValueError, RuntimeError) as exc:
        raise InputError(load_failure(spec, "cannot load the weights of model", exc)) from exc
    # Half-precision checkpoints train in fp32 master weights (autocast supplies bf16 on a GPU).
    model = model.float()
    prefix = getattr(model, "base_model_prefix", "") or ""
    missing = sorted(loading.get("missing_keys") or [])
    missing_base = [k for k in missing if prefix and k.startswith(prefix + ".")]
    if missing_base:
        raise InputError(
            f"the weights of model {name} do not match its config ({len(missing_base)} encoder "
            f"tensors missing, e.g. {missing_base[0]})"
        )
    head_initialised = bool(missing)
    tied = _tie_head(model) if head_initialised else None
    warnings = []
    if head_initialised:
        warnings.append(
            f"model {name} has no masked-LM head weights (config "
            f"{', '.join(getattr(config, 'architectures', None) or [config.model_type])}): the "
            "head is newly initialised"
            + (", its decoder tied to the word embeddings" if tied else ""))
        if warn:
            logger.warning("%s", warnings[-1])
    if len(tokenizer) > model.get_input_embeddings().weight.shape[0]:
        raise InputError(
            f"the tokenizer of {name} has {len(tokenizer)} tokens but the model only "
            f"{model.get_input_embeddings().weight.shape[0]} embeddings"
        )
    info = {"name": name, "path": path, "head_initialised": head_initialised,
            "architecture": type(model).__name__, "warnings": warnings}
    return model, tokenizer, info


def max_positions(model: Any) -> int | None:
    """Longest input the model accepts (RoBERTa-style models reserve pad_token_id + 1 positions)."""
    config = model.config
    n = getattr(config, "max_position_embeddings", None)
    if n is None:
        return None
    if config.model_type in {"roberta", "xlm-roberta", "camembert", "xlm-roberta-xl", "data2vec-text",
                             "roberta-prelayernorm", "xmod", "ibert", "longformer"}:
        n -= (config.pad_token_id or 0) + 1
    return int(n)


def check_max_length(model: Any, max_length: int, name: str) -> None:
    """Refuse a `max_length` longer than the model's positions (InputError naming it), before
    any text is packed to that length."""
    limit = max_positions(model)
    if limit is not None and max_length > limit:
        raise InputError(f"{max_length} exceeds what {name} accepts ({limit})",
                         param="max_length")


# ----- masking

IGNORE_INDEX = -100


def derived_seed(*parts: int) -> int:
    """A 63-bit seed derived from integers (e.g. run seed and step), stable across runs."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(2, np.uint64)[0] >> 1)


class MaskingCollator:
    """Turns examples (objects with `input_ids` and `weight`) into a padded, masked batch with a
    caller-supplied torch.Generator."""

    def __init__(self, tokenizer: Any, mlm_probability: float = 0.15, vocab_size: int | None = None):
        import torch

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

    def pad(self, examples: Sequence[Any]) -> tuple[Any, Any]:
        """(input_ids, attention_mask), right-padded to the longest example."""
        import torch

        width = max(len(e.input_ids) for e in examples)
        ids = torch.full((len(examples), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(examples), width), dtype=torch.long)
        for row, e in enumerate(examples):
            ids[row, : len(e.input_ids)] = torch.tensor(e.input_ids, dtype=torch.long)
            attention[row, : len(e.input_ids)] = 1
        return ids, attention

    def maskable(self, ids: Any, attention: Any) -> Any:
        """True where a token may be masked: real tokens that are not special tokens."""
        import torch

        return attention.bool() & ~torch.isin(ids, self.special_ids)

    def mask(
        self, ids: Any, maskable: Any, generator: Any
    ) -> tuple[Any, Any]:
        """(masked inputs, labels): labels hold the original id at targets and -100 elsewhere."""
        import torch

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
        self, examples: Sequence[Any], generator: Any
    ) -> dict[str, Any]:
        """A batch: input_ids, attention_mask, labels and per-example weights (float32)."""
        import torch

        ids, attention = self.pad(examples)
        inputs, labels = self.mask(ids, self.maskable(ids, attention), generator)
        weights = torch.tensor([e.weight for e in examples], dtype=torch.float32)
        return {"input_ids": inputs, "attention_mask": attention, "labels": labels, "weights": weights}


# ----- scoring masked tokens


def _output_head(model: Any) -> Any:
    """The module that maps hidden states to vocabulary logits (BERT's `cls`, RoBERTa's
    `lm_head`), or None where the model has no such single module (then every position's
    logits are computed)."""
    import torch

    for name in ("cls", "lm_head"):
        head = getattr(model, name, None)
        if isinstance(head, torch.nn.Module):
            return head
    return None


def target_losses(model: Any, input_ids: Any, attention_mask: Any, labels: Any
                  ) -> tuple[Any, Any]:
    """The cross-entropy of every target of a masked batch (labels `IGNORE_INDEX` elsewhere),
    with only the targets' hidden states put through the output head where the model has one
    (the vocabulary projection of every position costs about as much as the encoder).

    Args:
        model: A masked LM.
        input_ids: [B, T] masked inputs.
        attention_mask: [B, T].
        labels: [B, T] original ids at the targets, `IGNORE_INDEX` elsewhere.

    Returns:
        (float32 losses of the targets in row-major order, the [B, T] target mask).
    """
    import torch.nn.functional as F

    targets = labels != IGNORE_INDEX
    head = _output_head(model)
    if head is None:
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[targets]
    else:
        hidden = model.base_model(input_ids=input_ids,
                                  attention_mask=attention_mask).last_hidden_state
        logits = head(hidden[targets])
    return F.cross_entropy(logits.float(), labels[targets], reduction="none"), targets


def per_example_sums(token_losses: Any, targets: Any) -> tuple[Any, Any]:
    """Each example's summed target loss and its number of targets.

    Args:
        token_losses: `target_losses`' losses.
        targets: Its target mask.

    Returns:
        ([B] loss sums, [B] target counts).
    """
    import torch

    rows = torch.nonzero(targets)[:, 0]
    sums = torch.zeros(targets.shape[0], dtype=token_losses.dtype,
                       device=token_losses.device).index_add(0, rows, token_losses)
    return sums, targets.sum(dim=1)


def masked_lm_loss(model: Any, input_ids: Any, attention_mask: Any, labels: Any, *,
                   per_example: bool = False, weights: Any = None) -> Any:
    """The training loss of a masked batch (`target_losses`).

    Args:
        model: A masked LM.
        input_ids: [B, T] masked inputs.
        attention_mask: [B, T].
        labels: [B, T] original ids at the targets, `IGNORE_INDEX` elsewhere.
        per_example: The mean over the examples of each example's mean target loss (an
            example without targets counts 0) instead of the mean over all targets.
        weights: [B] example weights: the mean over the examples of weight x example loss
            (TADPOLE's lambda; implies `per_example`).

    Returns:
        A scalar tensor (with a graph when gradients are on).
    """
    token_losses, targets = target_losses(model, input_ids, attention_mask, labels)
    if not per_example and weights is None:
        return token_losses.mean()
    sums, counts = per_example_sums(token_losses, targets)
    losses = sums / counts.clamp(min=1)
    if weights is not None:
        losses = losses * weights.to(losses.device, losses.dtype)
    return losses.mean()


def masked_token_losses(model: Any, mask_id: int, pad_id: int,
                        copies: Sequence[tuple[Sequence[int], int]], *, batch_size: int = 64,
                        device: Any = "cpu") -> np.ndarray:
    """-log p(token | the rest) of each (token ids, position) copy: the position is masked and
    the model predicts it from every other token (one pseudo-log-likelihood term, Salazar et
    al. 2020). Each copy is one row of a batch; copies are batched by length (less padding),
    and only the masked positions go through the output head where the model has one.

    Args:
        model: A masked LM (`load_mlm`); its train/eval mode is restored afterwards.
        mask_id: The tokenizer's mask token id.
        pad_id: The tokenizer's padding id.
        copies: (token ids with special tokens, position to mask) pairs.
        batch_size: Copies per forward pass.
        device: Where the model is.

    Returns:
        float64 losses in nats, in the order of `copies`.
    """
    import torch

    out = np.zeros(len(copies), dtype=np.float64)
    if not len(copies):
        return out
    device = torch.device(device)
    head = _output_head(model)
    order = np.argsort(np.array([len(c[0]) for c in copies]), kind="stable")
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            for k in range(0, len(order), batch_size):
                chunk = order[k:k + batch_size]
                width = max(len(copies[i][0]) for i in chunk)
                ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
                attention = torch.zeros((len(chunk), width), dtype=torch.long)
                for row, i in enumerate(chunk):
                    seq = copies[i][0]
                    ids[row, :len(seq)] = torch.as_tensor(seq, dtype=torch.long)
                    attention[row, :len(seq)] = 1
                rows = torch.arange(len(chunk))
                cols = torch.tensor([int(copies[i][1]) for i in chunk])
                targets = ids[rows, cols].clone()
                ids[rows, cols] = mask_id
                ids, attention = ids.to(device), attention.to(device)
                rows, cols = rows.to(device), cols.to(device)
                with autocast(device):
                    if head is not None:
                        hidden = model.base_model(input_ids=ids,
                                                  attention_mask=attention).last_hidden_state
                        logits = head(hidden[rows, cols])
                    else:
                        logits = model(input_ids=ids, attention_mask=attention).logits[rows, cols]
                logp = torch.log_softmax(logits.float(), dim=-1)
                picked = logp.gather(1, targets.to(device).unsqueeze(1)).squeeze(1)
                out[chunk] = -picked.double().cpu().numpy()
    finally:
        model.train(was_training)
    return out
