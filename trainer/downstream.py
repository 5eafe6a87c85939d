"""Downstream value of continued pretraining: an encoder fine-tuned with a classification head
on a small labelled split, scored on a held-out split (`tapt bench downstream`).

The classifier is the encoder with mean pooling and a linear head over the labels (the module
Domain-Finetune trains, `retriever.learned.finetune_classifier.load_base`, with one output per
label), trained with cross-entropy for whole epochs (or a number of steps) of seeded shuffled
batches, AdamW with linear warmup/decay and a higher learning rate for the fresh head
(`util.training.make_optimizer`), bf16 autocast on a GPU. The same seed gives the same head, the
same batches and, on the CPU, the same numbers.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np

from tapt.errors import InputError
from tapt.util.checks import real_number, whole_number

_FEATURES = ("input_ids", "attention_mask", "token_type_ids")


@dataclass(frozen=True)
class FinetuneSettings:
    """How the classifier is fine-tuned; validated on creation (InputError naming the field).

    Attributes:
        epochs: Passes over the training split (ignored when `steps` is given).
        steps: Optimizer steps instead of epochs.
        batch_size: Examples per step.
        lr: Peak learning rate of the encoder.
        head_lr: Peak learning rate of the freshly initialised head.
        weight_decay: AdamW weight decay (none on biases and LayerNorm).
        warmup: Fraction of the steps of linear warmup.
        max_length: Tokens per example.
        max_grad_norm: Gradient clipping norm (0 = none).
    """

    epochs: int = 3
    steps: int | None = None
    batch_size: int = 16
    lr: float = 5e-5
    head_lr: float = 1e-3
    weight_decay: float = 0.01
    warmup: float = 0.1
    max_length: int = 64
    max_grad_norm: float = 1.0

    def __post_init__(self) -> None:
        whole_number(self.epochs, "ft_epochs", minimum=1)
        if self.steps is not None:
            whole_number(self.steps, "ft_steps", minimum=1)
        whole_number(self.batch_size, "ft_batch_size", minimum=1)
        whole_number(self.max_length, "max_length", minimum=8)
        real_number(self.lr, "ft_lr", low=0.0, low_open=True)
        real_number(self.head_lr, "ft_head_lr", low=0.0, low_open=True)
        real_number(self.weight_decay, "ft_weight_decay", low=0.0)
        real_number(self.warmup, "ft_warmup", low=0.0, high=1.0, high_open=True)
        real_number(self.max_grad_norm, "ft_max_grad_norm", low=0.0)

    def to_json(self) -> dict[str, Any]:
        """The settings as a JSON object (recorded in the report)."""
        return asdict(self)

    def total_steps(self, n_train: int) -> int:
        """Optimizer steps for a training split of `n_train` examples."""
        return int(self.steps or self.epochs * math.ceil(n_train / self.batch_size))


def classification_scores(truth: Sequence[int], predicted: Sequence[int]) -> dict[str, Any]:
    """Accuracy and macro-F1 (the unweighted mean F1 over every label that occurs in `truth`
    or in `predicted`, as scikit-learn's `f1_score(average="macro")`).

    Args:
        truth: The true label numbers.
        predicted: The predicted label numbers, one per example.

    Returns:
        accuracy, macro_f1 and f1 (label number -> F1).
    """
    truth_a, pred_a = np.asarray(truth), np.asarray(predicted)
    if truth_a.shape != pred_a.shape or truth_a.size == 0:
        raise InputError("need one prediction per example, and at least one example")
    f1 = {}
    for label in sorted(set(truth_a.tolist()) | set(pred_a.tolist())):
        tp = int(((truth_a == label) & (pred_a == label)).sum())
        fp = int(((truth_a != label) & (pred_a == label)).sum())
        fn = int(((truth_a == label) & (pred_a != label)).sum())
        f1[int(label)] = 0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn)
    return {"accuracy": float((truth_a == pred_a).mean()),
            "macro_f1": float(np.mean(list(f1.values()))), "f1": f1}


def _batch(tokens: Any, rows: np.ndarray, device: Any) -> dict[str, Any]:
    import torch

    return {k: torch.from_numpy(v).to(device) for k, v in tokens.features(rows).items()}


def finetune_classifier(model: str | None, train_texts: Sequence[str], train_labels: Sequence[int],
                        test_texts: Sequence[str], test_labels: Sequence[int], *,
                        n_labels: int, settings: FinetuneSettings = FinetuneSettings(),
                        seed: int = 0, device: str = "cpu", progress: bool = True,
                        desc: str = "fine-tune") -> dict[str, Any]:
    """Fine-tune `model` with a linear head on the training split; score it on the test split.

    Args:
        model: Encoder directory or hub name (a `tapt train` output, or the index's model).
        train_texts: Training examples.
        train_labels: Their label numbers, in 0..n_labels-1.
        test_texts: Test examples.
        test_labels: Their label numbers.
        n_labels: How many labels there are.
        settings: Epochs or steps, batch size, learning rates, length.
        seed: Seed of the head's initialisation and of the batch order.
        device: cpu or cuda.
        progress: Show a progress bar.
        desc: The progress bar's label.

    Returns:
        accuracy, macro_f1, f1 per label number, loss_curve (one training loss per step),
        steps, seconds, and the split sizes.

    Raises:
        InputError: a model that cannot be loaded, labels out of range, an empty split.
    """
    import torch
    from tqdm.auto import tqdm

    from tapt.indexer.encoding.batching import SortedBatches
    from tapt.retriever.learned.finetune_classifier import load_base
    from tapt.util.training import autocast, make_optimizer, resolve_device

    whole_number(n_labels, "n_labels", minimum=2)
    y_train, y_test = np.asarray(train_labels, dtype=np.int64), np.asarray(test_labels,
                                                                            dtype=np.int64)
    if not len(train_texts) or not len(test_texts):
        raise InputError("the training and the test split both need examples")
    if len(y_train) != len(train_texts) or len(y_test) != len(test_texts):
        raise InputError("need one label per example")
    for labels in (y_train, y_test):
        if labels.min() < 0 or labels.max() >= n_labels:
            raise InputError(f"label numbers must be in 0..{n_labels - 1}")
    start = time.perf_counter()
    torch_device = resolve_device(device)
    classifier, tokenizer, _ = load_base(model)
    # seeded here, after loading: a checkpoint without a pooler draws its initialisation from
    # the global generator, which must not change the head or the dropout masks
    torch.manual_seed(seed)
    classifier.head = torch.nn.Linear(classifier.encoder.config.hidden_size, n_labels)
    classifier.to(torch_device)
    train_tokens = SortedBatches(tokenizer, list(train_texts), settings.max_length, _FEATURES)
    test_tokens = SortedBatches(tokenizer, list(test_texts), settings.max_length, _FEATURES)
    total = settings.total_steps(len(train_texts))
    optimizer, scheduler = make_optimizer(classifier, settings.lr, settings.weight_decay,
                                          settings.warmup, total,
                                          prefix_lr={"head.": settings.head_lr})
    rng = np.random.default_rng(seed)
    labels_t = torch.from_numpy(y_train)
    curve: list[float] = []
    classifier.train()
    order: list[np.ndarray] = []
    with tqdm(total=total, desc=desc, unit="step", disable=not progress, leave=False) as bar:
        while len(curve) < total:
            if not order:
                perm = rng.permutation(len(train_texts))
                order = [perm[i:i + settings.batch_size]
                         for i in range(0, len(perm), settings.batch_size)]
            rows = order.pop(0)
            with autocast(torch_device):
                logits = classifier(**_batch(train_tokens, rows, torch_device))
            loss = torch.nn.functional.cross_entropy(logits.float(),
                                                     labels_t[rows].to(torch_device))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if settings.max_grad_norm:
                torch.nn.utils.clip_grad_norm_(classifier.parameters(), settings.max_grad_norm)
            optimizer.step()
            scheduler.step()
            curve.append(round(float(loss.detach()), 5))
            bar.update(1)
            bar.set_postfix(loss=f"{curve[-1]:.3f}")
    train_seconds = time.perf_counter() - start
    classifier.eval()
    predicted = np.empty(len(test_texts), dtype=np.int64)
    with torch.no_grad():
        for rows in test_tokens.batches(max(settings.batch_size, 64)):
            with autocast(torch_device):
                logits = classifier(**_batch(test_tokens, rows, torch_device))
            predicted[rows] = logits.float().argmax(-1).cpu().numpy()
    scores = classification_scores(y_test, predicted)
    return {**scores, "loss_curve": curve, "steps": total,
            "train_examples": len(train_texts), "test_examples": len(test_texts),
            "predicted_counts": np.bincount(predicted, minlength=n_labels).tolist(),
            "train_seconds": round(train_seconds, 2),
            "seconds": round(time.perf_counter() - start, 2)}
