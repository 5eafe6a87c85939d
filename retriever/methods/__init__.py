"""Selection methods: one registered `Method` per module of this package.

    >>> from tapt.retriever.methods import get_method, method_names
    >>> method_names()[:3]
    ('centroid', 'knn', 'iforest')
    >>> get_method("knn").budget
    'optional'

`base` defines the interface (and how to write a method in one file), `registry` the lookups.
"""

from tapt.retriever.methods.base import (
    CorpusCache,
    Memo,
    Method,
    NoParams,
    Params,
    Ranking,
    RankingInputs,
    SegmentView,
    SentenceScored,
    by_sentence_scores,
    param,
    take,
)
from tapt.retriever.methods.registry import (
    auto_candidates,
    get_method,
    method_names,
    methods,
    prerank_choices,
    register,
)

__all__ = ["CorpusCache", "Memo", "Method", "NoParams", "Params", "Ranking", "RankingInputs",
           "SegmentView", "SentenceScored", "auto_candidates", "by_sentence_scores",
           "get_method", "method_names", "methods", "param", "prerank_choices", "register",
           "take"]
