"""`RankingInputs`, what a method ranks with: the index and its segment view, the budget, the
task, and the caches shared between selections (`CorpusCache`) and between the methods of one task
(`Memo`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from tapt.errors import InputError
from tapt.retriever.methods.segments import SegmentView, small_budget
from tapt.retriever.ranking.budget import Budget
from tapt.retriever.ranking.document_pooling import DocumentShape

if TYPE_CHECKING:
    from tapt.indexer.index import Index


class Memo:
    """Intermediate scores several methods of one task share (Moore-Lewis scores, fused scores
    per budget), each computed once. `reused_seconds` adds up what the values taken from here
    cost when they were computed, so a method's time can be reported as if it ran alone."""

    def __init__(self) -> None:
        self._values: dict[Any, tuple[Any, float]] = {}
        self.reused_seconds = 0.0

    def __contains__(self, key: Any) -> bool:
        return key in self._values

    def get(self, key: Any, compute: Callable[[], Any]) -> Any:
        if key in self._values:
            value, seconds = self._values[key]
            self.reused_seconds += seconds
            return value
        t0, before = time.perf_counter(), self.reused_seconds
        value = compute()
        cost = time.perf_counter() - t0 + (self.reused_seconds - before)
        self._values[key] = (value, cost)
        return value


class CorpusCache:
    """Per-index data that selections reuse: segment views, the shape of its documents, the
    stored texts (for benchmarks that need them), and the vocabulary state of Moore-Lewis.

    Moore-Lewis's vocabulary is the corpus's words plus the task's, so a selection never depends
    on the ones before it. `share_vocabulary=True` lets the vocabulary grow across tasks instead
    (the words of earlier tasks count too): the published `tapt bench recall` numbers were made
    that way, and the benchmark keeps it.
    """

    def __init__(self, index: "Index", share_vocabulary: bool = False) -> None:
        self.index = index
        self.share_vocabulary = share_vocabulary
        self._views: dict[tuple[int | None, str], SegmentView] = {}
        self._texts: list[str] | None = None
        self._shape: DocumentShape | None = None
        self.extra_words = np.empty(0, dtype=np.uint64)  # earlier tasks' words outside the corpus

    def view(self, size: int | None, context: str = "sentence") -> SegmentView:
        if (size, context) not in self._views:
            self._views[size, context] = SegmentView.of(self.index, size, context)
        return self._views[size, context]

    def document_shape(self) -> DocumentShape:
        """How the index's sentences are grouped into documents (counted once, shard by shard
        from their memory-mapped document offsets: what `context` "auto" decides by)."""
        if self._shape is None:
            self._shape = DocumentShape.of_parts(s.docs for s in self.index.shards)
        return self._shape

    def texts(self) -> list[str]:
        if self._texts is None:
            self._texts = self.index.store.texts(range(self.index.n_sentences))
        return self._texts


@dataclass
class RankingInputs:
    """Everything a method ranks with.

    Attributes:
        index: The open index.
        view: Its segments at the selection's segment size.
        budget: The parsed budget, or None.
        seed: Seed of every random choice of the selection.
        task: The task's L2-normalised embeddings (None when the method needs none).
        texts: The task's sentences (None when the task was given as embeddings).
        corpus: Per-index caches shared between selections.
        memo: Per-task intermediate scores shared between the methods of one task.
        encoder: The index's model, when the task was embedded here (None when the task came
            as embeddings); for methods that embed or fine-tune.
        progress: Whether long steps may show progress bars.
    """

    index: "Index"
    view: SegmentView
    budget: Budget | None
    seed: int = 0
    task: np.ndarray | None = None
    texts: list[str] | None = None
    corpus: CorpusCache | None = None
    memo: Memo = field(default_factory=Memo)
    encoder: Any = None
    progress: bool = False

    def __post_init__(self) -> None:
        if self.corpus is None:
            self.corpus = CorpusCache(self.index)

    def need_task(self, method: str) -> np.ndarray:
        if self.task is None or len(self.task) == 0:
            raise InputError(f"{method} needs task sentences", param="task")
        return self.task

    def need_texts(self, method: str) -> list[str]:
        if not self.texts:
            raise InputError(f"{method} needs the task's text (give the task as files or as a "
                             "list of strings, not as embeddings)", param="task")
        return self.texts

    @property
    def n_positive(self) -> int | None:
        """The budget in sentences, when it is given in sentences (what self-training aims at)."""
        if self.budget is not None and self.budget.unit == "sentences":
            return int(self.budget.value)
        return None


def streams(ctx: "RankingInputs", factor: float = 1.0) -> bool:
    """Whether a selection's budget cut streams (`SentenceScored.budget_candidates`): a budget
    (times `factor`: a wider cut of candidates) of at most `segments.STREAM_SHARE` of the
    sentences, at sentence context."""
    if ctx.budget is None or ctx.view.context != "sentence":
        return False
    return small_budget(ctx.view, ctx.budget, factor)
