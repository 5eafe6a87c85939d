"""finetune: Domain-Finetune (Aharoni & Goldberg 2020), a fine-tuned encoder reranks the top
candidates of `fused` (`retriever.learned.finetune_classifier`)."""

from __future__ import annotations

from dataclasses import dataclass

from tapt.retriever.learned.finetune_classifier import (
    FinetuneConfig,
    finetune_scores,
    parse_candidates,
)
from tapt.retriever.methods.base import Params, SentenceScored, param
from tapt.retriever.methods.params import MAX_ROUNDS
from tapt.retriever.methods.registry import get_method, register


@dataclass(frozen=True)
class FinetuneParams(Params):
    rounds: int = param(2, "Self-training rounds of the pre-ranking's classifier.",
                        minimum=0, maximum=MAX_ROUNDS)
    finetune_model: str | None = param(None, "Encoder to fine-tune (default: the index's).")
    candidates: str = param("1.5x", "Rows rescored: a multiple of the budget, a count, or all.")
    steps: int = param(150, "Optimizer steps of the fine-tuning.", minimum=1)
    train_layers: int = param(2, "Top transformer layers trained with the head (0 = all).",
                              minimum=0)
    lr: float = param(5e-5, "Learning rate of the encoder layers.", minimum=0.0)
    self_training: int = param(0, "PU self-training rounds of the fine-tuned classifier.",
                               minimum=0)
    finetune_device: str = param("cpu", "Where to fine-tune and score.", choices=("cpu", "cuda"))

    def validate(self) -> None:
        parse_candidates(self.candidates)
        self.config(0)

    def config(self, seed: int) -> FinetuneConfig:
        return FinetuneConfig(model=self.finetune_model, candidates=self.candidates,
                              steps=self.steps, train_layers=self.train_layers, lr=self.lr,
                              rounds=self.self_training, seed=seed, device=self.finetune_device)


@register
class Finetune(SentenceScored):
    name = "finetune"
    summary = "Domain-Finetune: a fine-tuned encoder reranks the top candidates of fused."
    help = """The index's encoder (or `finetune_model`) with a new head is fine-tuned to tell the
    task from corpus rows ranked low by fused, then rescores fused's top `candidates` rows (read
    from the text store). Minutes per task on a CPU; the classifier is cached per task, model
    and parameters.

    \b
    Example:
      tapt select finetune idx --task task.jsonl --budget 20000sent --out sel.jsonl
    """
    order = 92
    needs_text = True
    min_task_sentences = 2
    warn_task_sentences = 50
    Params = FinetuneParams

    def sentence_scores(self, ctx, params):
        fused = get_method("fused")
        prerank, _ = fused.sentence_scores(ctx, fused.shared_params(params))
        result = finetune_scores(ctx.index, ctx.need_texts(self.name), prerank, ctx.n_positive,
                                 params.config(ctx.seed), progress=ctx.progress)
        return result.scores, {"finetune": result.info, "prerank": "fused"}

    def depends_on_budget(self, params):
        return True
