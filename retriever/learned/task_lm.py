"""The `perplexity` selection method's scorer: a masked LM adapted to the task rescores the best
candidates of a cheap pre-ranking by its per-token loss (the perplexity baseline of data
selection, Moore & Lewis 2010; for NER, Dai et al. 2019).

Protocol:
- model: the index's encoder (or `lm_model`) loaded as a masked LM (`mlm.load_mlm`; a base
  encoder without head weights, such as the packaged all-MiniLM-L6-v2, gets BERT's head with its
  decoder tied to the word embeddings, initialised from the seed);
- adaptation: `adapt_steps` steps of BERT-masked LM training (`mlm.MaskingCollator`, masks
  seeded per step) on the task sentences by the one training loop (`tapt.modeling.loop`: AdamW
  with linear warmup/decay), batches drawn from a seeded stream of the task;
- scoring: the pseudo-log-likelihood of each candidate (Salazar et al. 2020) from at most
  `max_masks` masked copies per sentence (`mlm.masked_token_losses`, each copy one row of a
  batch): positions spread evenly over the sentence's maskable tokens (the centres of
  `max_masks` equal strata), so a candidate costs at most `max_masks` rows whatever its length;
  its per-token loss is the mean over those positions, its score minus that loss;
- `difference`: minus the difference of the task model's loss and a general model's (the
  cross-entropy difference of Moore & Lewis): the general model is the same base adapted by the
  same recipe on as many random corpus sentences as the task has (a same-size general sample,
  as Moore & Lewis use), so that a base without trained head weights is comparable;
- candidates: the top c x budget rows of the pre-ranking (`finetune_classifier.candidate_rows`);
  their pre-ranking scores are re-dealt in the LM's order (`finetune_classifier.transplant`).

An adapted model is cached per task (or general sample), base weights and parameters under the
user cache directory (`perplexity/<fingerprint>/`, `finetune_cache`); with no writable cache it
is adapted and used without being kept.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np
from tqdm.auto import tqdm

from tapt.errors import InputError
from tapt.retriever.learned.finetune_cache import load_cached, store_cached
from tapt.retriever.learned.finetune_classifier import (
    candidate_rows,
    parse_candidates,
    task_fingerprint,
    transplant,
)

log = logging.getLogger(__name__)

CACHE_KIND = "perplexity"
CACHE_FORMAT = 1
SCORE_CHUNK = 2048      # candidate sentences tokenised and scored at a time


@dataclass(frozen=True)
class PerplexityConfig:
    """Parameters of the perplexity scorer, validated on creation.

    model: masked LM to adapt (None: the index's own model); candidates: "3x" (times the
    budget), a row count, or "all"; adapt_steps: optimizer steps on the task (0: the model as
    it is); max_masks: masked copies scored per sentence at most; difference: subtract a
    general model's per-token loss.
    """

    model: str | None = None
    candidates: str = "3x"
    adapt_steps: int = 100
    lr: float = 1e-4
    batch_size: int = 16
    max_length: int = 64
    warmup: float = 0.1
    weight_decay: float = 0.01
    mlm_probability: float = 0.15
    max_masks: int = 8
    difference: bool = False
    seed: int = 0
    device: str = "cpu"
    score_batch_size: int = 256

    def __post_init__(self) -> None:
        parse_candidates(self.candidates)
        for name in ("batch_size", "max_masks", "score_batch_size"):
            if int(getattr(self, name)) < 1:
                raise InputError(f"must be at least 1, got {getattr(self, name)}", param=name)
        if self.adapt_steps < 0:
            raise InputError(f"must be 0 or more, got {self.adapt_steps}", param="adapt_steps")
        if self.max_length < 8:
            raise InputError(f"must be at least 8 tokens, got {self.max_length}",
                             param="max_length")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise InputError(f"must be a positive number, got {self.lr}", param="lr")
        if not 0 <= self.warmup < 1:
            raise InputError(f"is a fraction of the steps in [0, 1), got {self.warmup}",
                             param="warmup")
        if not 0 < self.mlm_probability < 1:
            raise InputError(f"must be in (0, 1), got {self.mlm_probability}",
                             param="mlm_probability")
        if self.device not in ("cpu", "cuda"):
            raise InputError(f"must be cpu or cuda, got {self.device!r}", param="lm_device")

    def fingerprint_fields(self) -> dict[str, Any]:
        """Everything that changes an adapted model (not what or where it scores)."""
        return {k: v for k, v in asdict(self).items()
                if k not in ("candidates", "max_masks", "difference", "device",
                             "score_batch_size")}


def mask_positions(n_maskable: int, max_masks: int) -> np.ndarray:
    """Which of a sentence's maskable tokens are scored: all of them when there are at most
    `max_masks`, else the centres of `max_masks` equal strata (spread over the whole sentence,
    the same every time).

    Args:
        n_maskable: The sentence's maskable (non-special) tokens.
        max_masks: The most positions scored.

    Returns:
        Indices into the maskable tokens, ascending.
    """
    if n_maskable <= max_masks:
        return np.arange(n_maskable)
    return ((np.arange(max_masks) + 0.5) * n_maskable / max_masks).astype(np.int64)


@dataclass(frozen=True)
class _Seq:
    """One adaptation example, as `MaskingCollator` reads it."""

    input_ids: tuple[int, ...]
    weight: float = 1.0


@dataclass
class AdaptedLM:
    """A masked LM adapted to some text, ready to score sentences by per-token loss."""

    model: Any
    tokenizer: Any
    config: PerplexityConfig
    device: Any
    info: dict[str, Any] = field(default_factory=dict)

    def token_losses(self, texts: Sequence[str], progress: bool = False,
                     desc: str = "perplexity scoring") -> np.ndarray:
        """Each text's mean loss over its scored masked positions (`mask_positions`).

        Args:
            texts: The sentences (truncated to `config.max_length` tokens).
            progress: Show a progress bar.
            desc: The progress bar's label.

        Returns:
            float64 losses in nats per token; NaN for a text with no maskable token.
        """
        from tapt.modeling.mlm import masked_token_losses

        special = set(int(i) for i in self.tokenizer.all_special_ids)
        out = np.full(len(texts), np.nan, dtype=np.float64)
        mask_id, pad_id = int(self.tokenizer.mask_token_id), int(self.tokenizer.pad_token_id)
        bar = tqdm(total=len(texts), desc=desc, unit="sent", disable=not progress)
        for start in range(0, len(texts), SCORE_CHUNK):
            chunk = list(texts[start:start + SCORE_CHUNK])
            encoded = self.tokenizer(chunk, truncation=True,
                                     max_length=self.config.max_length)["input_ids"]
            copies: list[tuple[tuple[int, ...], int]] = []
            owner: list[int] = []
            for i, ids in enumerate(encoded):
                ids = tuple(int(t) for t in ids)
                maskable = [p for p, t in enumerate(ids) if t not in special]
                for j in mask_positions(len(maskable), self.config.max_masks):
                    copies.append((ids, maskable[int(j)]))
                    owner.append(i)
            losses = masked_token_losses(self.model, mask_id, pad_id, copies,
                                         batch_size=self.config.score_batch_size,
                                         device=self.device)
            owners = np.asarray(owner, dtype=np.int64)
            sums = np.bincount(owners, weights=losses, minlength=len(chunk))
            counts = np.bincount(owners, minlength=len(chunk))
            with np.errstate(invalid="ignore", divide="ignore"):
                out[start:start + len(chunk)] = np.where(counts > 0, sums / np.maximum(counts, 1),
                                                         np.nan)
            self.info["scored_positions"] = self.info.get("scored_positions", 0) + len(copies)
            bar.update(len(chunk))
        bar.close()
        return out


def adapt(model: Any, collator: Any, sequences: Sequence[tuple[int, ...]],
          config: PerplexityConfig, device: Any, progress: bool = False,
          desc: str = "perplexity adapt") -> list[float]:
    """`config.adapt_steps` masked-LM steps on `sequences`: batches from a seeded stream of
    them, masks from a generator seeded per step.

    Args:
        model: The masked LM, on `device` (left in eval mode).
        collator: A `mlm.MaskingCollator` of its tokenizer.
        sequences: Token ids with special tokens, one sentence each.
        config: Steps, batch size, learning rate, schedule and seed.
        device: Where the model is.
        progress: Show a progress bar.
        desc: The progress bar's label.

    Returns:
        The loss of every step.
    """
    import torch

    from tapt.modeling.loop import Loop, Schedule
    from tapt.modeling.mlm import derived_seed, masked_lm_loss

    if not config.adapt_steps:
        return []
    rng = np.random.default_rng([config.seed, 17])

    def stream():
        while True:
            yield from rng.permutation(len(sequences))

    order = stream()

    def loss_of(step: int) -> Any:
        batch = collator([_Seq(sequences[next(order)]) for _ in range(config.batch_size)],
                         torch.Generator().manual_seed(derived_seed(config.seed, step)))
        return masked_lm_loss(model, batch["input_ids"].to(device),
                              batch["attention_mask"].to(device), batch["labels"].to(device))

    def diverged(value: float, step: int, lr: float) -> Exception:
        return InputError(f"the masked LM's adaptation diverged (loss {value} at step {step}); "
                          "lower its learning rate", param="lm_model")

    loop = Loop(model, Schedule(config.adapt_steps, config.lr, config.weight_decay,
                                config.warmup, 1.0), device, desc=desc, progress=progress,
                diverged=diverged)
    curve = loop.run(loss_of)
    model.eval()
    return curve


def fit_lm(spec: str | None, texts: Sequence[str], config: PerplexityConfig, role: str,
           extra: dict[str, Any] | None = None, progress: bool = False) -> AdaptedLM:
    """Load the masked LM `spec` and adapt it to `texts` (or load the adapted weights from the
    cache).

    Args:
        spec: A model argument (directory, packaged default, hub name).
        texts: The sentences it is adapted to.
        config: The adaptation's parameters.
        role: "task" or "general" (part of the cache key and of the progress bars).
        extra: More of the cache key (the index and rows of a general sample).
        progress: Show progress bars.

    Returns:
        The adapted model (`info`: model, whether its head was initialised, adaptation seconds
        and final loss, whether it came from the cache).
    """
    import torch

    from tapt.indexer.encoding.encoder import _state_sha256
    from tapt.modeling.mlm import MaskingCollator, check_max_length, load_mlm
    from tapt.util.training import resolve_device

    try:
        device = resolve_device(config.device)
    except InputError as exc:
        raise InputError(str(exc), param="lm_device") from exc
    torch.manual_seed(config.seed)          # a base encoder's new head, reproducibly
    try:
        model, tokenizer, loaded = load_mlm(spec, warn=False)
        check_max_length(model, config.max_length, loaded["name"])
    except InputError as exc:
        raise InputError(str(exc), param="lm_model") from exc
    info: dict[str, Any] = {"model": loaded["name"], "head_initialised": loaded["head_initialised"],
                            "texts": len(texts)}
    if loaded["head_initialised"] and not config.adapt_steps:
        log.warning("%s; with adapt_steps 0 its scores are noise", loaded["warnings"][0])
    sequences = [tuple(int(t) for t in ids) for ids in
                 tokenizer(list(texts), truncation=True, max_length=config.max_length)["input_ids"]]
    fingerprint = hashlib.sha256(json.dumps({
        "format": CACHE_FORMAT, "role": role, "texts": task_fingerprint(texts),
        "model": _state_sha256(model), "params": config.fingerprint_fields(),
        **(extra or {})}, sort_keys=True).encode()).hexdigest()
    cached = load_cached(model, fingerprint, kind=CACHE_KIND) if config.adapt_steps else None
    info["cached"] = cached is not None
    model.to(device)
    if cached is None and config.adapt_steps:
        t0 = time.perf_counter()
        collator = MaskingCollator(tokenizer, config.mlm_probability,
                                   model.get_input_embeddings().weight.shape[0])
        curve = adapt(model, collator, sequences, config, device, progress,
                      desc=f"perplexity adapt ({role})")
        cached = {"adapt_seconds": round(time.perf_counter() - t0, 1),
                  "final_loss": round(float(np.mean(curve[-20:])), 4)}
        store_cached(model, fingerprint, cached, kind=CACHE_KIND)
    model.eval()
    info.update({"adapt_seconds": (cached or {}).get("adapt_seconds", 0.0),
                 "final_loss": (cached or {}).get("final_loss")})
    return AdaptedLM(model, tokenizer, config, device, info)


def index_model(index: Any) -> str:
    """The model argument of the index's own encoder.

    Args:
        index: An open index.

    Returns:
        Its manifest's model source (or name).
    """
    return index.manifest["model"].get("source") or index.manifest["model"]["name"]


def general_rows(index: Any, count: int, seed: int) -> np.ndarray:
    """A seeded same-size general sample.

    Args:
        index: An open index.
        count: How many rows (at most the corpus).
        seed: The selection's seed.

    Returns:
        `count` random corpus rows, sorted.
    """
    rng = np.random.default_rng([seed, 23])
    return np.sort(rng.choice(index.n_sentences, size=min(count, index.n_sentences),
                              replace=False))


def fit_models(index: Any, task_texts: Sequence[str], config: PerplexityConfig,
               progress: bool = False) -> tuple[AdaptedLM, AdaptedLM | None]:
    """The task model and, with `difference`, the general model (module docstring).

    Args:
        index: An open `tapt.indexer.index.Index` (its text store is read for the general
            sample).
        task_texts: The task sentences.
        config: The scorer's parameters.
        progress: Show progress bars.

    Returns:
        (task model, general model or None).
    """
    if len(task_texts) < 1:
        raise InputError("perplexity needs task sentences", param="task")
    spec = config.model if config.model is not None else index_model(index)
    task = fit_lm(spec, task_texts, config, "task", progress=progress)
    if not config.difference:
        return task, None
    rows = general_rows(index, len(task_texts), config.seed)
    general = fit_lm(spec, index.store.texts(rows.tolist()), config, "general",
                     {"index": index.uuid, "manifest": index.manifest_sha256,
                      "rows": hashlib.sha256(rows.tobytes()).hexdigest()}, progress)
    return task, general


@dataclass
class PerplexityResult:
    """scores: every row on the pre-ranking's scale; candidates and their LM scores (minus the
    per-token loss, or minus the loss difference)."""

    scores: np.ndarray
    candidates: np.ndarray
    candidate_scores: np.ndarray
    info: dict[str, Any]


def perplexity_scores(index: Any, prerank: np.ndarray, n_positive: int | None,
                      models: tuple[AdaptedLM, AdaptedLM | None],
                      config: PerplexityConfig, progress: bool = False) -> PerplexityResult:
    """The pre-ranking with its top candidates reordered by the task LM's per-token loss.

    Args:
        index: An open `tapt.indexer.index.Index` (its text store is read).
        prerank: A score of every corpus row, higher = more task-like (e.g. fused).
        n_positive: Sentences the budget asks for (None: needs candidates `all` or a count).
        models: `fit_models`' task model and general model (or None).
        config: The scorer's parameters.
        progress: Show progress bars.

    Returns:
        A `PerplexityResult` (info: counts, timings, the models' adaptation).
    """
    prerank = np.asarray(prerank, dtype=np.float64)
    if len(prerank) != index.n_sentences:
        raise InputError("the pre-ranking must score every corpus row")
    task_lm, general_lm = models
    t0 = time.perf_counter()
    candidates = candidate_rows(prerank, n_positive, config.candidates)
    texts = index.store.texts(candidates.tolist())
    loss = task_lm.token_losses(texts, progress, "perplexity scoring (task)")
    if general_lm is not None:
        loss = loss - general_lm.token_losses(texts, progress, "perplexity scoring (general)")
    scores = -loss
    finite = np.isfinite(scores)
    if not finite.all():     # no maskable token: the least task-like of the candidates
        scores[~finite] = (scores[finite].min() - 1.0) if finite.any() else 0.0
    info: dict[str, Any] = {
        "task_model": dict(task_lm.info), "candidate_rows": int(len(candidates)),
        "max_masks": config.max_masks, "difference": config.difference,
        "device": str(task_lm.device), "score_seconds": round(time.perf_counter() - t0, 1)}
    if general_lm is not None:
        info["general_model"] = dict(general_lm.info)
    return PerplexityResult(transplant(prerank, candidates, scores), candidates, scores, info)
