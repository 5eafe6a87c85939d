"""Domain-Finetune (Aharoni & Goldberg 2020): the transformer itself fine-tuned as a domain
classifier, then used to rerank the best candidates of a cheap pre-ranking.

Protocol (theirs, with tapt's PU rules where they leave a choice open):
- positives: the task sentences; negatives: corpus rows sampled from below rank 2 x `n_positive`
  of the pre-ranking (the rows the PU classifier's self-training also takes negatives from);
- model: the encoder (the index's own by default) with mean pooling and a linear head
  (`tapt.modeling.classifier`), trained with binary cross-entropy for a fixed number of steps
  on class-balanced batches (half task, half negatives) by the one training loop
  (`tapt.modeling.loop`: AdamW with linear warmup/decay, bf16 autocast on a GPU);
- optional PU self-training (`rounds`): the top `positive_fraction` x `n_positive` candidates by
  the last classifier join the positives and training continues for another `steps`;
- scoring: the classifier's log-odds of every candidate (the top c x budget rows of the
  pre-ranking, or all rows), text read from the index's store, length-sorted batches. The
  candidates' pre-ranking scores are then re-dealt in the classifier's order ("rank transplant"),
  so every row keeps a score on the pre-ranking's scale and a budget within the candidates takes
  exactly the classifier's top rows.

The fine-tuned classifier is cached per task, model and parameters under the user cache
directory (`finetune/<fingerprint>/`, see `finetune_cache`): the entry records its fingerprint
and the SHA-256 of its weights; an entry that does not match is rebuilt with a warning; with no
writable cache the classifier is trained and used without being kept.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from tqdm.auto import tqdm

from tapt.errors import InputError
from tapt.modeling.classifier import TokenizedTexts, freeze_below, load_classifier
from tapt.retriever.learned.finetune_cache import CACHE_FORMAT, load_cached, store_cached
from tapt.retriever.scoring import arrays

log = logging.getLogger(__name__)

# `auto`: an ONNX Runtime export of the fine-tuned classifier on the CPU (checked against torch
# before use; torch if it disagrees), torch on a GPU.
SCORE_BACKENDS = ("auto", "torch", "onnx")
ONNX_TOLERANCE = 1e-3  # max |logit difference| to torch on the probe batches


@dataclass(frozen=True)
class FinetuneConfig:
    """Parameters of Domain-Finetune, validated on creation.

    model: encoder to fine-tune (None: the index's own model); candidates: "1.5x" (times the
    budget), a row count, or "all"; steps: optimizer steps per round; train_layers: how many of
    the encoder's top transformer layers are trained with the head (0 = all of them; 2 keeps a
    CPU run under 15 minutes, `docs/benchmarks-quality.md`); rounds: PU self-training rounds
    after the first fit; head_lr: the learning rate of the new linear head (a fresh head
    learns at a linear probe's rate, the pretrained layers at fine-tuning's).
    """

    model: str | None = None
    candidates: str = "1.5x"
    steps: int = 150
    batch_size: int = 32
    max_length: int = 64
    lr: float = 5e-5
    head_lr: float = 1e-3
    warmup: float = 0.1
    weight_decay: float = 0.01
    train_layers: int = 2
    rounds: int = 0
    positive_fraction: float = 0.5
    seed: int = 0
    device: str = "cpu"
    score_batch_size: int = 128
    score_backend: str = "auto"

    def __post_init__(self) -> None:
        parse_candidates(self.candidates)
        for name in ("steps", "batch_size", "score_batch_size"):
            if int(getattr(self, name)) < 1:
                raise InputError(f"must be at least 1, got {getattr(self, name)}", param=name)
        if self.batch_size < 2:
            raise InputError("must be at least 2 (half task, half negatives)", param="batch_size")
        if self.max_length < 8:
            raise InputError(f"must be at least 8 tokens, got {self.max_length}",
                             param="max_length")
        for name in ("lr", "head_lr"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise InputError(f"must be a positive number, got {value}", param=name)
        if not 0 <= self.warmup < 1:
            raise InputError(f"is a fraction of the steps in [0, 1), got {self.warmup}",
                             param="warmup")
        if self.rounds < 0:
            raise InputError("must be 0 or more", param="rounds")
        if self.train_layers < 0:
            raise InputError("must be 0 (all) or a number of layers", param="train_layers")
        if not 0 < self.positive_fraction <= 1:
            raise InputError("must be in (0, 1]", param="positive_fraction")
        if self.device not in ("cpu", "cuda"):
            raise InputError(f"must be cpu or cuda, got {self.device!r}", param="device")
        if self.score_backend not in SCORE_BACKENDS:
            raise InputError(f"must be one of {', '.join(SCORE_BACKENDS)}, got "
                             f"{self.score_backend!r}", param="score_backend")

    def fingerprint_fields(self) -> dict[str, Any]:
        """Everything that changes the trained classifier (not where or how fast it scores)."""
        return {k: v for k, v in asdict(self).items()
                if k not in ("candidates", "device", "score_batch_size", "score_backend")}


def parse_candidates(spec: str) -> tuple[str, float]:
    """'1.5x' -> ('times', 1.5); '40000' -> ('count', 40000); 'all' -> ('all', 0)."""
    text = str(spec).strip().lower()
    try:
        if text == "all":
            return "all", 0.0
        if text.endswith("x"):
            kind, value = "times", float(text[:-1])
        else:
            kind, value = "count", float(int(text))
    except ValueError as exc:
        raise InputError(f"{spec!r}: use 1.5x, a row count, or all", param="candidates") from exc
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"{spec!r} must be positive", param="candidates")
    return kind, value


def candidate_rows(prerank: np.ndarray, n_positive: int | None, spec: str) -> np.ndarray:
    """The top rows of the pre-ranking that the classifier rescores (all rows for `all`)."""
    kind, value = parse_candidates(spec)
    n = len(prerank)
    if kind == "all":
        return np.arange(n)
    if kind == "times":
        if not n_positive:
            raise InputError("a candidates multiple needs a budget in sentences", param="candidates")
        size = int(math.ceil(value * n_positive))
    else:
        size = int(value)
    return np.sort(arrays.rank(prerank)[: min(size, n)])


def negative_rows(prerank: np.ndarray, n_positive: int | None, count: int,
                  rng: np.random.Generator) -> np.ndarray:
    """`count` rows sampled from below rank 2 x n_positive of the pre-ranking (the bottom
    two-thirds without a budget), as the PU classifier samples its negatives."""
    order = arrays.rank(prerank)
    start = min(2 * int(n_positive), len(order) - 1) if n_positive else len(order) // 3
    pool = order[start:]
    return np.sort(rng.choice(pool, size=min(count, len(pool)), replace=False))


def transplant(prerank: np.ndarray, rows: np.ndarray, new_scores: np.ndarray) -> np.ndarray:
    """`prerank` with the scores of `rows` re-dealt in the order of `new_scores`: the best row by
    `new_scores` gets the highest pre-ranking score among `rows`, and so on."""
    out = np.asarray(prerank, dtype=np.float64).copy()
    rows = np.asarray(rows, dtype=np.int64)
    if len(rows):
        values = np.sort(out[rows])[::-1]
        out[rows[arrays.rank(new_scores)]] = values
    return out


def task_fingerprint(texts: Sequence[str]) -> str:
    h = hashlib.sha256()
    for text in texts:
        h.update(b"\x00")
        h.update(text.encode("utf-8"))
    return h.hexdigest()


def _train(model: Any, tokens: TokenizedTexts, positives: np.ndarray, negatives: np.ndarray,
           config: FinetuneConfig, device: Any, round_: int, progress: bool) -> list[float]:
    """`config.steps` class-balanced steps (`modeling.loop`); returns the loss curve."""
    import torch

    from tapt.modeling.loop import Loop, Schedule

    rng = np.random.default_rng([config.seed, round_])
    half = config.batch_size // 2

    def stream(rows: np.ndarray):
        while True:
            yield from rng.permutation(rows)

    pos_stream, neg_stream = stream(positives), stream(negatives)
    labels = torch.tensor([1.0] * half + [0.0] * (config.batch_size - half), device=device)
    loss_fn = torch.nn.BCEWithLogitsLoss()

    def loss_of(step: int) -> Any:
        rows = np.array([next(pos_stream) for _ in range(half)]
                        + [next(neg_stream) for _ in range(config.batch_size - half)])
        return loss_fn(model(**tokens.batch(rows, device)).float(), labels)

    loop = Loop(model, Schedule(config.steps, config.lr, config.weight_decay, config.warmup,
                                1.0, {"head.": config.head_lr}), device,
                desc=f"finetune round {round_}", progress=progress, diverged=_diverged)
    curve = loop.run(loss_of)
    model.eval()
    return curve


def _diverged(value: float, step: int, lr: float) -> Exception:
    return InputError(f"the domain classifier's training diverged (loss {value} at step "
                      f"{step}); lower its learning rate (now {lr:g})", param="lr")


def _score(model: Any, tokenizer: Any, texts: Sequence[str], config: FinetuneConfig,
           device: Any, progress: bool, desc: str = "finetune scoring") -> np.ndarray:
    """Log-odds of every text, length-sorted batches, inference mode."""
    import torch

    from tapt.util.training import autocast

    if not len(texts):
        return np.empty(0, dtype=np.float32)
    tokens = TokenizedTexts(tokenizer, texts, config.max_length)
    out = np.empty(len(texts), dtype=np.float32)
    with torch.inference_mode():
        for rows in tqdm(tokens.batches(config.score_batch_size), desc=desc,
                         disable=not progress):
            with autocast(device):
                logits = model(**tokens.batch(rows, device))
            out[rows] = logits.float().cpu().numpy()
    return out


_PROBES = ["The patient was given 5 mg of the drug twice a day.", "Short.",
           "Section 2(b) of the Act applies to every contract signed after 1 January, and to "
           "each party that agreed to its terms in writing before that date.", "Hello world"]


def _export_onnx(model: Any, tokenizer: Any, config: FinetuneConfig) -> Any:
    """An ONNX Runtime session of the classifier, or None (with a warning) when it cannot be
    exported or disagrees with torch on the probe batches; the file lives only in memory."""
    import warnings

    import torch

    try:
        import onnxruntime as ort
    except ImportError:
        log.warning("onnxruntime is missing: the fine-tuned classifier scores with torch")
        return None
    model = model.to("cpu").eval()
    features = tokenizer(_PROBES, padding=True, truncation=True, max_length=config.max_length,
                         return_tensors="pt")
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in features]

    class Wrapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, *tensors):
            return self.inner(**dict(zip(names, tensors)))

    work = Path(tempfile.mkdtemp(prefix="tapt-finetune-onnx-"))
    try:
        dynamic = {n: {0: "batch", 1: "tokens"} for n in names}
        dynamic["logit"] = {0: "batch"}
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(Wrapped().eval(), tuple(features[n] for n in names),
                              str(work / "classifier.onnx"), input_names=names,
                              output_names=["logit"], dynamic_axes=dynamic, opset_version=17,
                              dynamo=False)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        session = ort.InferenceSession(str(work / "classifier.onnx"), options,
                                       providers=["CPUExecutionProvider"])
        worst = 0.0
        for batch in (_PROBES[:1], _PROBES[1:]):
            f = tokenizer(batch, padding=True, truncation=True, max_length=config.max_length,
                          return_tensors="pt")
            with torch.no_grad():
                ref = model(**{n: f[n] for n in names}).numpy()
            got = session.run(None, {n: f[n].numpy().astype(np.int64) for n in names})[0]
            worst = max(worst, float(np.max(np.abs(got - ref))))
        if worst > ONNX_TOLERANCE:
            log.warning("the ONNX export of the classifier differs from torch by %.2g; scoring "
                        "with torch", worst)
            return None
        return session
    except Exception as exc:  # noqa: BLE001 - any exporter failure means "score with torch"
        log.warning("the classifier cannot be exported to ONNX (%s); scoring with torch",
                    str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__)
        return None
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _score_onnx(session: Any, tokenizer: Any, texts: Sequence[str], config: FinetuneConfig,
                progress: bool) -> np.ndarray:
    from concurrent.futures import ThreadPoolExecutor

    names = [i.name for i in session.get_inputs()]
    tokens = TokenizedTexts(tokenizer, texts, config.max_length).sorted
    batches = tokens.batches(config.score_batch_size)
    out = np.empty(len(texts), dtype=np.float32)
    with ThreadPoolExecutor(max_workers=1) as pool:  # pads the next batch while ORT runs
        ahead = pool.submit(tokens.features, batches[0])
        for b, rows in enumerate(tqdm(batches, desc="finetune scoring", disable=not progress)):
            features = ahead.result()
            if b + 1 < len(batches):
                ahead = pool.submit(tokens.features, batches[b + 1])
            out[rows] = session.run(None, {n: features[n] for n in names})[0]
    return out


@dataclass
class FinetuneResult:
    """scores: every row on the pre-ranking's scale; candidates and their classifier log-odds."""

    scores: np.ndarray
    candidates: np.ndarray
    candidate_scores: np.ndarray
    info: dict[str, Any]


@dataclass
class FittedClassifier:
    """A fine-tuned domain classifier ready to score text (log-odds, higher = more task-like)."""

    model: Any
    tokenizer: Any
    config: FinetuneConfig
    device: Any
    info: dict[str, Any]

    def score(self, texts: Sequence[str], progress: bool = False) -> np.ndarray:
        """Log-odds of `texts` with the configured backend (ONNX Runtime on the CPU under
        `auto`, exported once per fitted classifier and checked against torch)."""
        backend = self.config.score_backend
        if backend == "auto":
            backend = "torch" if self.device.type == "cuda" else "onnx"
        if backend == "onnx" and self.device.type == "cuda":
            raise InputError("the ONNX backend scores on the CPU only; use torch with cuda",
                             param="score_backend")
        if backend == "onnx" and len(texts) >= 4 * self.config.score_batch_size:
            session = self._onnx()
            if session is not None:
                return _score_onnx(session, self.tokenizer, texts, self.config, progress)
        return _score(self.model, self.tokenizer, texts, self.config, self.device, progress)

    def _onnx(self) -> Any:
        if "_onnx" not in self.__dict__:
            t0 = time.perf_counter()
            self.__dict__["_onnx"] = _export_onnx(self.model, self.tokenizer, self.config)
            self.info["onnx_export_seconds"] = round(time.perf_counter() - t0, 1)
            self.info["score_backend"] = "onnx" if self.__dict__["_onnx"] is not None else "torch"
        return self.__dict__["_onnx"]


def fit_classifier(index: Any, task_texts: Sequence[str], prerank: np.ndarray,
                   n_positive: int | None, config: FinetuneConfig = FinetuneConfig(),
                   progress: bool = True) -> tuple[FittedClassifier, np.ndarray, list[str]]:
    """Fine-tune (or load from the cache) the classifier of a task; also returns the candidate
    rows of the pre-ranking and their text (read once, used by self-training and scoring)."""
    import torch

    from tapt.util.training import resolve_device

    if len(task_texts) < 2:
        raise InputError("finetune needs at least 2 task sentences", param="task")
    prerank = np.asarray(prerank, dtype=np.float64)
    if len(prerank) != index.n_sentences:
        raise InputError("the pre-ranking must score every corpus row")
    device = resolve_device(config.device)
    torch.manual_seed(config.seed)
    model, tokenizer, base_sha = load_classifier(config.model if config.model is not None
                                           else index.manifest["model"].get("source")
                                           or index.manifest["model"]["name"])
    freeze_below(model, config.train_layers)
    model.to(device)
    rng = np.random.default_rng(config.seed)
    negatives = negative_rows(prerank, n_positive, config.steps * (config.batch_size // 2) *
                              (config.rounds + 1), rng)
    candidates = candidate_rows(prerank, n_positive, config.candidates)
    fingerprint = hashlib.sha256(json.dumps({
        "format": CACHE_FORMAT, "task": task_fingerprint(task_texts), "model": base_sha,
        "params": config.fingerprint_fields(), "index": index.uuid,
        "manifest": index.manifest_sha256, "n_positive": n_positive,
        "negatives": hashlib.sha256(negatives.tobytes()).hexdigest(),
        "candidates": hashlib.sha256(candidates.tobytes()).hexdigest()
        if config.rounds else None}, sort_keys=True).encode()).hexdigest()
    info: dict[str, Any] = {"model": config.model or index.manifest["model"]["name"],
                            "candidate_rows": int(len(candidates)),
                            "negative_rows": int(len(negatives)), "device": str(device)}
    cand_texts = index.store.texts(candidates.tolist())
    fitted = FittedClassifier(model, tokenizer, config, device, info)
    cached = load_cached(model, fingerprint)
    info["cached"] = cached is not None
    t0 = time.perf_counter()
    if cached is None:
        neg_texts = index.store.texts(negatives.tolist())
        pos_texts = list(task_texts)
        curves = []
        for round_ in range(config.rounds + 1):
            texts = pos_texts + neg_texts
            tokens = TokenizedTexts(tokenizer, texts, config.max_length)
            pos = np.arange(len(pos_texts))
            neg = np.arange(len(pos_texts), len(texts))
            curves.append(_train(model, tokens, pos, neg, config, device, round_, progress))
            if round_ == config.rounds:
                break
            cand_scores = fitted.score(cand_texts, progress)
            k = int(n_positive) if n_positive else int((cand_scores > 0).sum())
            top = arrays.rank(cand_scores)[: max(1, int(config.positive_fraction * k))]
            pos_texts = list(task_texts) + [cand_texts[i] for i in top.tolist()]
        meta = {"train_seconds": round(time.perf_counter() - t0, 1),
                "final_loss": round(float(np.mean(curves[-1][-20:])), 4),
                "positives": len(pos_texts)}
        store_cached(model, fingerprint, meta)
    else:
        meta = cached
    info.update({"train_seconds": meta.get("train_seconds"), "final_loss": meta.get("final_loss"),
                 "positives": meta.get("positives")})
    return fitted, candidates, cand_texts


def finetune_scores(index: Any, task_texts: Sequence[str], prerank: np.ndarray,
                    n_positive: int | None, config: FinetuneConfig = FinetuneConfig(),
                    progress: bool = True) -> FinetuneResult:
    """Domain-Finetune scores of every corpus row: the pre-ranking with its top candidates
    reordered by a fine-tuned classifier (module docstring).

    Args:
        index: An open `tapt.indexer.index.Index` (its text store is read).
        task_texts: The task sentences (positives).
        prerank: A score of every corpus row, higher = more task-like (e.g. fused).
        n_positive: Sentences the budget asks for (None: no budget; needs candidates `all`
            or a count).
        config: Model, training and scoring parameters.
        progress: Show progress bars.

    Returns:
        A `FinetuneResult` (info: timings, counts, whether the classifier came from the cache).
    """
    t_start = time.perf_counter()
    fitted, candidates, cand_texts = fit_classifier(index, task_texts, prerank, n_positive,
                                                    config, progress)
    info = fitted.info
    t0 = time.perf_counter()
    cand_scores = fitted.score(cand_texts, progress)
    info["score_seconds"] = round(time.perf_counter() - t0, 1)
    info["total_seconds"] = round(time.perf_counter() - t_start, 1)
    log.info("finetune: %d candidates, trained in %ss (cached: %s), scored in %ss",
             len(candidates), info["train_seconds"], info["cached"], info["score_seconds"])
    return FinetuneResult(transplant(np.asarray(prerank, dtype=np.float64), candidates,
                                     cand_scores), candidates, cand_scores, dict(info))
