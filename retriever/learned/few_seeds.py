"""Moore-Lewis that a few task sentences can support: the task expanded with its most confident
neighbours before the language models are fitted (pseudo-relevance feedback).

Moore & Lewis fit the in-domain LM on the task and the general LM on an equally sized random
sample of the corpus. With 100 task sentences both models are fitted on ~1,500 words, so the
difference is mostly sampling noise. Expansion adds the corpus rows that a meaning scorer (the PU
classifier) ranks highest to the in-domain side, with the same rule the PU classifier's own
self-training uses for its pseudo-positives: the top `fraction` (0.5) of the `n_positive` rows the
budget asks for. The general LM is then fitted on a random corpus sample of the same total size,
as in the original method. `order=1` scores with the add-one unigrams of the same two models.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from tapt.errors import InputError
from tapt.indexer.reading.lexical import Lexicon
from tapt.retriever.scoring import arrays
from tapt.retriever.scoring.ngram_lm import HashedLMs


class PoolText:
    """Every corpus sentence as hashed word bigrams: an index's stored lexical ids (`of_index`,
    nothing re-tokenised per task) or sentences held in memory (`of`, tokenised once)."""

    def __init__(self, lexicon: Lexicon, apply=None) -> None:
        """`apply`: runs a function of one shard's lexicon on every shard (default the
        lexicon's `map_shards`; an index's `lexicon_scores`, which a served index fans out)."""
        self.lexicon = lexicon
        self.apply = apply or lexicon.map_shards

    @classmethod
    def of(cls, texts: Sequence[str]) -> "PoolText":
        return cls(Lexicon.of_texts(texts))

    @classmethod
    def of_index(cls, index) -> "PoolText":
        """The stored lexical ids of an open index (checked on first use)."""
        return cls(index.lexicon, index.lexicon_scores)

    def __len__(self) -> int:
        return len(self.lexicon)


@dataclass(frozen=True)
class LexicalConfig:
    """order: 2 (bigram, Witten-Bell) or 1 (add-one unigram); fraction: share of `n_positive` top
    meaning-ranked rows added to the in-domain side (0 = plain Moore-Lewis)."""

    order: int = 2
    fraction: float = 0.5

    def __post_init__(self) -> None:
        if self.order not in (1, 2):
            raise InputError(f"n-gram order must be 1 or 2, got {self.order}", param="order")
        if not 0 <= self.fraction <= 1:
            raise InputError(f"expansion fraction must be in [0, 1], got {self.fraction}",
                             param="fraction")


def expansion_rows(meaning: np.ndarray, n_positive: int | None, fraction: float) -> np.ndarray:
    """The top `fraction x n_positive` rows of a meaning ranking (none without a budget); the
    count defaults to the rows with a positive score (log-odds above 0.5) when `n_positive` is None."""
    if fraction <= 0:
        return np.empty(0, dtype=np.int64)
    k = int(n_positive) if n_positive else int((np.asarray(meaning) > 0).sum())
    k = max(0, min(int(fraction * k), len(meaning)))
    return np.sort(arrays.rank(meaning)[:k])


class LexicalModel:
    """An in-domain and a general LM (`ngram_lm.HashedLMs`); `score_*` give Moore-Lewis
    differences."""

    def __init__(self, pool: PoolText, task_texts: Sequence[str], extra_rows: np.ndarray,
                 seed: int, order: int = 2) -> None:
        if not task_texts:
            raise InputError("moore-lewis needs the task's text")
        self.pool, self.order = pool, order
        self.models = HashedLMs(pool.lexicon, list(task_texts), extra_rows, seed, order=order)
        self.in_sentences = int(self.models.in_sentences)
        self.general_sentences = int(self.models.general_sentences)

    def score_rows(self, rows: np.ndarray | None = None) -> np.ndarray:
        """Scores of corpus rows (all of them when `rows` is None)."""
        if rows is None:
            return self.models.score_all(self.pool.apply)
        return self.models.score_rows(rows)

    def score_texts(self, texts: Sequence[str]) -> np.ndarray:
        """Scores of texts outside the corpus (their new words are unknown to both models)."""
        return self.models.score_texts(list(texts))


def expanded_moore_lewis(pool: PoolText, task_texts: Sequence[str], meaning: np.ndarray,
                         n_positive: int | None, config: LexicalConfig = LexicalConfig(),
                         seed: int = 0) -> tuple[np.ndarray, dict]:
    """Moore-Lewis of every corpus row with the task expanded by its top meaning-ranked rows."""
    extra = expansion_rows(meaning, n_positive, config.fraction)
    model = LexicalModel(pool, task_texts, extra, seed, config.order)
    info = {"lm_order": config.order, "expansion_rows": int(len(extra)),
            "in_domain_sentences": model.in_sentences,
            "general_lm_sentences": model.general_sentences}
    return model.score_rows(), info
