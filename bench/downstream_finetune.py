"""Downstream value of continued pretraining: an encoder fine-tuned with a classification head
on labelled examples, scored on held-out ones (`tapt bench downstream`), fold by fold so that
every example is tested once.

The classifier is the encoder with mean pooling and a linear head over the labels
(`tapt.modeling.classifier`, the module Domain-Finetune trains, with one output per label),
trained with cross-entropy for whole epochs (or a number of steps) of seeded shuffled batches by
the one training loop (`tapt.modeling.loop`: AdamW with linear warmup/decay, a higher learning
rate for the fresh head, bf16 autocast on a GPU). The same seed gives the same head, the same
batches and, on the CPU, the same numbers. `probe` mode fits a logistic regression on the frozen
encoder's features instead.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np

from tapt.errors import InputError
from tapt.util.checks import choice, real_number, whole_number

FINETUNE_MODES = ("full", "probe")


@dataclass(frozen=True)
class FinetuneSettings:
    """How the classifier is fine-tuned; validated on creation (InputError naming the field).

    Attributes:
        mode: full (the encoder and a linear head trained together) or probe (a logistic
            regression on the frozen encoder's mean-pooled features: seconds, where full
            fine-tuning takes minutes on a CPU).
        epochs: Passes over the training split (ignored when `steps` is given).
        steps: Optimizer steps instead of epochs.
        batch_size: Examples per step.
        lr: Peak learning rate of the encoder.
        head_lr: Peak learning rate of the freshly initialised head.
        weight_decay: AdamW weight decay (none on biases and LayerNorm).
        warmup: Fraction of the steps of linear warmup.
        max_length: Tokens per example.
        max_grad_norm: Gradient clipping norm (0 = none).
        probe_c: The probe's inverse L2 strength.
    """

    mode: str = "full"
    epochs: int = 3
    steps: int | None = None
    batch_size: int = 16
    lr: float = 1e-4
    head_lr: float = 1e-3
    weight_decay: float = 0.01
    warmup: float = 0.1
    max_length: int = 64
    max_grad_norm: float = 1.0
    probe_c: float = 1.0

    def __post_init__(self) -> None:
        choice(self.mode, "ft_mode", FINETUNE_MODES)
        real_number(self.probe_c, "ft_probe_c", low=0.0, low_open=True)
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
        accuracy, macro_f1, f1 per label number, predicted (the test examples' predicted label
        numbers), loss_curve (one training loss per step), steps, seconds, and the split sizes.

    Raises:
        InputError: a model that cannot be loaded, labels out of range, an empty split.
    """
    import torch

    from tapt.modeling.classifier import TokenizedTexts, load_classifier
    from tapt.modeling.loop import Loop, Schedule, epoch_batches
    from tapt.util.training import autocast, resolve_device

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
    # seeded around the loading: a checkpoint without a pooler draws its initialisation from
    # the global generator, which must not change the head or the dropout masks
    classifier, tokenizer, _ = load_classifier(model, n_labels)
    torch.manual_seed(seed)
    torch.nn.init.kaiming_uniform_(classifier.head.weight, a=math.sqrt(5))
    torch.nn.init.uniform_(classifier.head.bias, -classifier.head.in_features ** -0.5,
                           classifier.head.in_features ** -0.5)
    classifier.to(torch_device)
    train_tokens = TokenizedTexts(tokenizer, train_texts, settings.max_length)
    test_tokens = TokenizedTexts(tokenizer, test_texts, settings.max_length)
    total = settings.total_steps(len(train_texts))
    rows_of = epoch_batches(len(train_texts), settings.batch_size, seed)
    labels_t = torch.from_numpy(y_train)

    def loss_of(step: int) -> Any:
        rows = rows_of(step)
        logits = classifier(**train_tokens.batch(rows, torch_device))
        return torch.nn.functional.cross_entropy(logits.float(),
                                                 labels_t[rows].to(torch_device))

    loop = Loop(classifier, Schedule(total, settings.lr, settings.weight_decay, settings.warmup,
                                     settings.max_grad_norm, {"head.": settings.head_lr}),
                torch_device, desc=desc, progress=progress, leave=False)
    curve = [round(v, 5) for v in loop.run(loss_of)]
    train_seconds = time.perf_counter() - start
    classifier.eval()
    predicted = np.empty(len(test_texts), dtype=np.int64)
    with torch.no_grad():
        for rows in test_tokens.batches(max(settings.batch_size, 64)):
            with autocast(torch_device):
                logits = classifier(**test_tokens.batch(rows, torch_device))
            predicted[rows] = logits.float().argmax(-1).cpu().numpy()
    scores = classification_scores(y_test, predicted)
    return {**scores, "predicted": predicted, "loss_curve": curve, "steps": total,
            "train_examples": len(train_texts), "test_examples": len(test_texts),
            "predicted_counts": np.bincount(predicted, minlength=n_labels).tolist(),
            "train_seconds": round(train_seconds, 2),
            "seconds": round(time.perf_counter() - start, 2)}


def probe_features(model: str | None, texts: Sequence[str], *, max_length: int,
                   device: str = "cpu", batch_size: int = 64) -> np.ndarray:
    """Mean-pooled last hidden states of `texts` under a frozen encoder (a linear probe's
    features).

    Args:
        model: Encoder directory or hub name.
        texts: The texts.
        max_length: Tokens per text.
        device: cpu or cuda.
        batch_size: Texts per forward pass.

    Returns:
        [len(texts), hidden] float32 features.
    """
    import torch

    from tapt.modeling.classifier import TokenizedTexts, load_classifier
    from tapt.util.training import autocast, resolve_device

    torch_device = resolve_device(device)
    classifier, tokenizer, _ = load_classifier(model, 2)
    encoder = classifier.encoder.to(torch_device).eval()
    tokens = TokenizedTexts(tokenizer, texts, max_length)
    out = np.empty((len(texts), encoder.config.hidden_size), dtype=np.float32)
    with torch.no_grad():
        for rows in tokens.batches(batch_size):
            batch = tokens.batch(rows, torch_device)
            with autocast(torch_device):
                hidden = encoder(**batch).last_hidden_state.float()
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            out[rows] = ((hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)).cpu().numpy()
    return out


def probe_predict(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray, *,
                  c: float = 1.0, seed: int = 0) -> np.ndarray:
    """A multinomial logistic regression (standardised features, L2 strength 1/c) fitted on
    the training features; the test examples' predicted label numbers.

    Args:
        train_x: Training features.
        train_y: Their label numbers.
        test_x: Test features.
        c: Inverse regularisation strength.
        seed: Seed of the solver.

    Returns:
        The predictions.
    """
    from sklearn.linear_model import LogisticRegression

    mean, std = train_x.mean(0), train_x.std(0) + 1e-6
    fit = LogisticRegression(C=c, max_iter=2000, random_state=seed)
    fit.fit((train_x - mean) / std, train_y)
    return fit.predict((test_x - mean) / std).astype(np.int64)


def cross_validate(model: str | None, texts: Sequence[str], labels: np.ndarray,
                   fold_of: np.ndarray, *, n_labels: int, settings: FinetuneSettings,
                   seed: int = 0, device: str = "cpu", progress: bool = True,
                   desc: str = "fine-tune") -> dict[str, Any]:
    """Every example predicted once, by the classifier trained on the other folds: k
    fine-tunings (`settings.mode` full) or k linear probes on one set of frozen features
    (probe).

    Args:
        model: Encoder directory or hub name.
        texts: Every labelled example.
        labels: Their label numbers.
        fold_of: Each example's fold (`downstream_data.group_folds`).
        n_labels: How many labels there are.
        settings: How each fold's classifier is trained.
        seed: Seed of the heads, the batch orders and the solver.
        device: cpu or cuda.
        progress: Show progress bars.
        desc: The progress bars' label.

    Returns:
        predicted (every example's predicted label number), correct (0/1 per example),
        accuracy, macro_f1, f1, per-fold accuracy, loss curves (full), seconds.
    """
    start = time.perf_counter()
    labels = np.asarray(labels, dtype=np.int64)
    predicted = np.empty(len(texts), dtype=np.int64)
    folds = int(fold_of.max()) + 1
    curves, per_fold = [], []
    features = (probe_features(model, texts, max_length=settings.max_length, device=device)
                if settings.mode == "probe" else None)
    for fold in range(folds):
        test = np.flatnonzero(fold_of == fold)
        train = np.flatnonzero(fold_of != fold)
        if features is not None:
            predicted[test] = probe_predict(features[train], labels[train], features[test],
                                            c=settings.probe_c, seed=seed)
        else:
            result = finetune_classifier(
                model, [texts[i] for i in train], labels[train], [texts[i] for i in test],
                labels[test], n_labels=n_labels, settings=settings,
                seed=int(np.random.SeedSequence([seed, fold]).generate_state(1)[0]),
                device=device, progress=progress, desc=f"{desc} fold {fold + 1}/{folds}")
            predicted[test] = result["predicted"]
            curves.append(result["loss_curve"])
        per_fold.append(round(float((predicted[test] == labels[test]).mean()), 4))
    scores = classification_scores(labels, predicted)
    return {**scores, "predicted": predicted, "correct": (predicted == labels).astype(np.int8),
            "fold_accuracy": per_fold, "loss_curves": curves,
            "seconds": round(time.perf_counter() - start, 2)}
