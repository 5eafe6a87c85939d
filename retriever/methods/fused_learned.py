"""fused-learned: classifier, Moore-Lewis (task expanded by the classifier's top rows) and density,
their z-scores weighted per task by the held-out protocol (`retriever.learned.fusion`)."""

from __future__ import annotations

from dataclasses import dataclass

from tapt.retriever.learned.few_seeds import LexicalConfig, PoolText
from tapt.retriever.methods.base import Params, SentenceScored, param
from tapt.retriever.methods.learned_scorers import TaskData, learned_fusion
from tapt.retriever.methods.params import MAX_ROUNDS
from tapt.retriever.methods.registry import register


@dataclass(frozen=True)
class FusedLearnedParams(Params):
    rounds: int = param(2, "Self-training rounds of the classifier.",
                        minimum=0, maximum=MAX_ROUNDS)
    expand: float = param(0.5, "Share of the budget's top classifier rows added to the task "
                               "before Moore-Lewis's language models are fitted (0 = none).",
                          minimum=0.0, maximum=1.0)
    folds: int = param(5, "Held-out folds the weights are fitted on.", minimum=2)
    sample: int = param(4000, "Random corpus sentences scored against the held-out task.",
                        minimum=10)

    def validate(self) -> None:
        LexicalConfig(fraction=self.expand)


def task_data(ctx, params, name: str, expand: float = 0.5) -> TaskData:
    """The task of a selection, on the index's stored lexical ids (for the n-gram models).

    Args:
        ctx: The selection's context.
        params: The method's parameters (`rounds`).
        name: The method, for its errors.
        expand: Share of the budget's top classifier rows added to the task for Moore-Lewis.

    Returns:
        The task data the learned scorers are fitted on.
    """
    texts = ctx.need_texts(name)
    task = ctx.need_task(name)
    return TaskData(ctx.index, PoolText.of_index(ctx.index), task, list(texts), ctx.n_positive,
                    seed=ctx.seed, rounds=params.rounds,
                    lexical=LexicalConfig(fraction=expand))


@register
class FusedLearned(SentenceScored):
    name = "fused-learned"
    summary = "Classifier + Moore-Lewis + density with per-task weights from held-out task text."
    help = """The weights of the three z-scores are fitted on the task alone: five blocks of the
    task are held out in turn and scored against a random corpus sample by scorers fitted on the
    rest (never on oracle labels). Moore-Lewis is fitted on the task expanded by the classifier's
    most confident rows, which helps most when the task is small. The selection's info holds
    the weights and the held-out AUC of every scorer.

    \b
    Example:
      tapt select fused-learned idx --task task.jsonl --budget 20000sent --out sel.jsonl
    """
    order = 91
    needs_text = True
    min_task_sentences = 10
    warn_task_sentences = 50
    Params = FusedLearnedParams

    def sentence_scores(self, ctx, params):
        data = task_data(ctx, params, self.name, params.expand)

        def compute():
            got = learned_fusion(data, folds=params.folds, sample=params.sample)
            return got.scores, {"fusion": got.weights.to_json(), "expand": params.expand}

        key = ("fused-learned", ctx.n_positive, params, ctx.seed)
        return ctx.memo.get(key, compute)

    def depends_on_budget(self, params):
        return True
