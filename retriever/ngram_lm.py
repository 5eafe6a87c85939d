"""Word bigram language models in numpy, for Moore-Lewis cross-entropy difference (pure, no I/O).

Smoothing: interpolated Witten-Bell. A bigram probability is
    P(w | v) = (c(v, w) + T(v) * P1(w)) / (c(v) + T(v))
with c(v) the count of v as a history, T(v) the number of distinct words seen after v, and P1
the add-one unigram over the shared vocabulary plus one unknown-word slot,
    P1(w) = (c(w) + 1) / (N + V + 1).
A history never seen (c(v) = 0) backs off to P1 alone. Sentences are wrapped in <s> ... </s>;
cross-entropy is the mean of -log2 P over a sentence's predicted tokens (words and </s>).
Counting and lookups are vectorised: bigrams are int64 keys `v * V + w`, counted with
`np.unique` and looked up with `np.searchsorted`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

import numpy as np

_TOKEN = re.compile(r"\w+|[^\w\s]")
BOS, EOS = 0, 1


class Vocabulary:
    """Word -> id, growing as texts are encoded (ids 0 and 1 are <s> and </s>)."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {"<s>": BOS, "</s>": EOS}

    def __len__(self) -> int:
        return len(self.ids)

    def copy(self) -> "Vocabulary":
        """An independent vocabulary with the same ids so far."""
        other = Vocabulary()
        other.ids = dict(self.ids)
        return other

    def encode(self, texts: Iterable[str]) -> tuple[np.ndarray, np.ndarray]:
        """Flat token ids of all texts, each wrapped in <s> </s>, and the length of each."""
        ids, lengths = [], []
        get = self.ids.setdefault
        for text in texts:
            words = _TOKEN.findall(text.lower())
            ids.append(BOS)
            ids.extend(get(w, len(self.ids)) for w in words)
            ids.append(EOS)
            lengths.append(len(words) + 2)
        return np.asarray(ids, dtype=np.int64), np.asarray(lengths, dtype=np.int64)


def _bigrams(ids: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(history, word) of every predicted token: all positions but each sentence's <s>."""
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    predicted = np.ones(len(ids), dtype=bool)
    predicted[starts] = False
    pos = np.flatnonzero(predicted)
    return ids[pos - 1], ids[pos]


def select_sentences(ids: np.ndarray, lengths: np.ndarray, which: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
    """The encoded sentences `which` (indices) out of a flat encoding."""
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    sel_len = lengths[which]
    base = np.repeat(starts[which] - np.concatenate(([0], np.cumsum(sel_len)[:-1])), sel_len)
    return ids[base + np.arange(int(sel_len.sum()))], sel_len


@dataclass
class BigramLM:
    """A Witten-Bell interpolated bigram model over a vocabulary of `vocab_size` ids."""

    vocab_size: int
    unigram_counts: np.ndarray
    bigram_keys: np.ndarray
    bigram_counts: np.ndarray
    history_counts: np.ndarray
    history_types: np.ndarray

    @classmethod
    def fit(cls, ids: np.ndarray, lengths: np.ndarray, vocab_size: int) -> "BigramLM":
        hist, word = _bigrams(ids, lengths)
        V = int(vocab_size)
        unigram = np.bincount(word, minlength=V).astype(np.float64)
        keys, counts = np.unique(hist * V + word, return_counts=True)
        history_counts = np.bincount(hist, minlength=V).astype(np.float64)
        history_types = np.bincount(keys // V, minlength=V).astype(np.float64)
        return cls(V, unigram, keys, counts.astype(np.float64), history_counts, history_types)

    def log2_probs(self, hist: np.ndarray, word: np.ndarray) -> np.ndarray:
        """log2 P(word | hist) for arrays of ids (ids >= vocab_size are unknown words)."""
        V = self.vocab_size
        known_w = word < V
        w = np.where(known_w, word, 0)
        h = np.where(hist < V, hist, 0)
        c_w = np.where(known_w, self.unigram_counts[w], 0.0)
        p1 = (c_w + 1.0) / (self.unigram_counts.sum() + V + 1.0)
        c_h = np.where(hist < V, self.history_counts[h], 0.0)
        t_h = np.where(hist < V, self.history_types[h], 0.0)
        keys = h * V + w
        at = np.minimum(np.searchsorted(self.bigram_keys, keys), len(self.bigram_keys) - 1)
        found = known_w & (hist < V) & (self.bigram_keys[at] == keys)
        c_hw = np.where(found, self.bigram_counts[at], 0.0)
        seen = c_h > 0
        p = np.where(seen, (c_hw + t_h * p1) / np.where(seen, c_h + t_h, 1.0), p1)
        return np.log2(p)

    def cross_entropy(self, ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Per-sentence mean -log2 P of its predicted tokens."""
        hist, word = _bigrams(ids, lengths)
        logp = self.log2_probs(hist, word)
        starts = np.concatenate(([0], np.cumsum(lengths - 1)[:-1]))
        return (-np.add.reduceat(logp, starts) / (lengths - 1)).astype(np.float32)


def moore_lewis(in_domain: BigramLM, general: BigramLM, ids: np.ndarray,
                lengths: np.ndarray) -> np.ndarray:
    """Moore & Lewis 2010 score H_general(s) - H_in(s): higher = more in-domain."""
    return general.cross_entropy(ids, lengths) - in_domain.cross_entropy(ids, lengths)


def moore_lewis_scores(pool_texts: list[str], task_texts: list[str], seed: int = 0,
                       vocab: Vocabulary | None = None,
                       pool_encoded: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Cross-entropy difference of every pool sentence: in-domain LM on the task, general LM on
    an equally sized seeded random sample of the pool. Pass `vocab` and `pool_encoded` (the
    pool encoded with `vocab`) to reuse them.

    Raises:
        ValueError: no task text.
    """
    if not task_texts:
        raise ValueError("Moore-Lewis needs the task's text")
    vocab = vocab or Vocabulary()
    ids, lengths = pool_encoded if pool_encoded is not None else vocab.encode(pool_texts)
    n = len(lengths)
    sample = np.sort(np.random.default_rng(seed).choice(n, size=min(len(task_texts), n),
                                                        replace=False))
    task_ids, task_len = vocab.encode(task_texts)
    in_lm = BigramLM.fit(task_ids, task_len, len(vocab))
    general = BigramLM.fit(*select_sentences(ids, lengths, sample), len(vocab))
    return moore_lewis(in_lm, general, ids, lengths)


def unigram_cross_entropy(lm: BigramLM, ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Per-sentence mean -log2 P1 of its predicted tokens under the model's add-one unigram alone
    (order 1: what a handful of task sentences can estimate without a history)."""
    _, word = _bigrams(ids, lengths)
    V = lm.vocab_size
    known = word < V
    counts = np.where(known, lm.unigram_counts[np.where(known, word, 0)], 0.0)
    logp = np.log2((counts + 1.0) / (lm.unigram_counts.sum() + V + 1.0))
    starts = np.concatenate(([0], np.cumsum(lengths - 1)[:-1]))
    return (-np.add.reduceat(logp, starts) / (lengths - 1)).astype(np.float32)
