"""A user's task model scores sentences: a Hugging Face token-classification model (a NER
tagger) counts the entities it finds, a sequence-classification model gives a class's
probability. What `task-model` rescores its candidates with (the NER-Selected data selection of
task-tuned taggers, generalised to any classifier).

Which head a model has is read from its config (`architectures`); its labels from `id2label`.
A token classifier's prediction is the arg-max label of every word piece (special tokens and
padding left out); an entity span is a run of non-outside pieces, a new one starting at a label
that begins with `B-`. torch and transformers are imported lazily.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from tqdm.auto import tqdm

from tapt.errors import InputError

log = logging.getLogger(__name__)

KINDS = ("token", "sequence")
TOKEN_SCORES = ("count", "density")
SEQUENCE_SCORES = ("probability",)
MAX_LENGTH = 512


@dataclass
class LoadedTaskModel:
    """A loaded classification model.

    Attributes:
        kind: "token" or "sequence" classification.
        model: The torch module, in eval mode on `device`.
        tokenizer: Its tokenizer.
        labels: Label names by id.
        device: The torch device.
        name: The model's display name.
        max_length: Word pieces kept per sentence.
    """

    kind: str
    model: Any
    tokenizer: Any
    labels: list[str]
    device: Any
    name: str
    max_length: int

    def label_id(self, label: str | None) -> int:
        """The id of a label given by name or id; None: the default (for a token classifier
        the label named "O", else id 0; for a two-class sequence classifier id 1).

        Args:
            label: A label name, an id as text, or None.

        Returns:
            The label's id.

        Raises:
            InputError: no such label, or no default for a sequence classifier of more than
                two classes.
        """
        if label is None:
            if self.kind == "token":
                return self.labels.index("O") if "O" in self.labels else 0
            if len(self.labels) == 2:
                return 1
            raise InputError(f"{self.name} has {len(self.labels)} classes "
                             f"({', '.join(self.labels)}): name the one to score",
                             param="label")
        if label in self.labels:
            return self.labels.index(label)
        if str(label).strip().isdigit() and int(label) < len(self.labels):
            return int(label)
        raise InputError(f"{label!r} is not a label of {self.name} ({', '.join(self.labels)})",
                         param="label")


def load_task_model(spec: str, device: str = "cpu") -> LoadedTaskModel:
    """Load a token- or sequence-classification model (a local directory or a hub name).

    Args:
        spec: The model argument.
        device: "cpu" or "cuda".

    Returns:
        The loaded `LoadedTaskModel`.

    Raises:
        InputError: naming `task_model` when it cannot be loaded or is not a token- or
            sequence-classification model; `task_model_device` cuda without a GPU.
    """
    from tapt.indexer.encoding.models import display_name, load_failure, resolve_model
    from tapt.util.training import quiet_transformers, resolve_device

    try:
        torch_device = resolve_device(device)
    except InputError as exc:
        raise InputError(exc.message, param="task_model_device") from exc
    name = display_name(spec)
    try:
        path = resolve_model(spec)
    except InputError as exc:
        raise InputError(exc.message, param="task_model") from exc
    from transformers import (
        AutoConfig,
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
        AutoTokenizer,
    )

    try:
        with quiet_transformers():
            config = AutoConfig.from_pretrained(path)
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(load_failure(spec, "cannot load the config of model", exc),
                         param="task_model") from exc
    architectures = " ".join(getattr(config, "architectures", None) or [])
    if "ForTokenClassification" in architectures:
        kind, loader = "token", AutoModelForTokenClassification
    elif "ForSequenceClassification" in architectures:
        kind, loader = "sequence", AutoModelForSequenceClassification
    else:
        raise InputError(f"{name} is not a token- or sequence-classification model (its "
                         f"architectures: {architectures or 'none recorded'})",
                         param="task_model")
    try:
        with quiet_transformers():
            tokenizer = AutoTokenizer.from_pretrained(path)
            model = loader.from_pretrained(path)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise InputError(load_failure(spec, "cannot load model", exc),
                         param="task_model") from exc
    if getattr(tokenizer, "pad_token_id", None) is None:
        raise InputError(f"the tokenizer of {name} has no padding token", param="task_model")
    count = int(getattr(model.config, "num_labels", 0) or 0)
    id2label = getattr(model.config, "id2label", None) or {}
    labels = [str(id2label.get(i, id2label.get(str(i), f"LABEL_{i}"))) for i in range(count)]
    if count < 2:
        raise InputError(f"{name} has {count} label(s); a classifier needs two or more",
                         param="task_model")
    limit = min(int(getattr(tokenizer, "model_max_length", MAX_LENGTH) or MAX_LENGTH),
                int(getattr(model.config, "max_position_embeddings", MAX_LENGTH) or MAX_LENGTH),
                MAX_LENGTH)
    return LoadedTaskModel(kind, model.float().to(torch_device).eval(), tokenizer, labels,
                     torch_device, name, limit)


def entity_scores(predicted: np.ndarray, valid: np.ndarray, outside: int,
                  begins: np.ndarray, score: str) -> np.ndarray:
    """Per-sentence entity scores from arg-max token labels.

    Args:
        predicted: (sentences x pieces) predicted label ids.
        valid: Same shape, True where a piece is a real word piece (not special, not padding).
        outside: The label id that is no entity.
        begins: Bool per label id: whether the label starts a span (`B-...`).
        score: "count": entity spans per sentence; "density": entity pieces per piece.

    Returns:
        float64 scores, one per sentence.
    """
    entity = valid & (predicted != outside)
    if score == "density":
        return entity.sum(1) / np.maximum(valid.sum(1), 1)
    before = np.zeros_like(entity)
    before[:, 1:] = entity[:, :-1]
    starts = entity & (~before | begins[predicted])
    return starts.sum(1).astype(np.float64)


def score_texts(task_model: LoadedTaskModel, texts: Sequence[str], score: str, label: int,
                batch_size: int = 32, progress: bool = False) -> tuple[np.ndarray, dict]:
    """Score sentences with a task model, in length-sorted batches.

    Args:
        task_model: The loaded model.
        texts: The sentences.
        score: "count" or "density" (token classification), "probability" (sequence).
        label: For token classification the outside label's id; for sequence classification
            the scored class's id.
        batch_size: Sentences per forward pass.
        progress: Whether to show a progress bar.

    Returns:
        (scores, info): float64 scores in input order; the seconds and sentences scored.
    """
    import torch

    from tapt.indexer.encoding.batching import SortedBatches

    t0 = time.perf_counter()
    out = np.empty(len(texts), dtype=np.float64)
    if len(texts):
        tok = task_model.tokenizer
        tokens = SortedBatches(tok, texts, task_model.max_length,
                               ("input_ids", "attention_mask", "token_type_ids"))
        special = np.asarray(sorted(set(tok.all_special_ids)), dtype=np.int64)
        begins = np.asarray([name.upper().startswith("B-") for name in task_model.labels])
        with torch.inference_mode():
            for rows in tqdm(tokens.batches(batch_size), desc="task model",
                             disable=not progress):
                features = tokens.features(rows)
                batch = {k: torch.from_numpy(v).to(task_model.device)
                         for k, v in features.items()}
                logits = task_model.model(**batch).logits.float()
                if task_model.kind == "sequence":
                    out[rows] = torch.softmax(logits, -1)[:, label].cpu().numpy()
                    continue
                ids = features["input_ids"]
                valid = (features["attention_mask"] > 0) & ~np.isin(ids, special)
                out[rows] = entity_scores(logits.argmax(-1).cpu().numpy(), valid, label,
                                          begins, score)
    return out, {"scored_sentences": int(len(texts)),
                 "task_model_seconds": round(time.perf_counter() - t0, 3)}
