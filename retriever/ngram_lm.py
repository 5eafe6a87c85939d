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

from dataclasses import dataclass
from typing import Iterable

import numpy as np

from tapt.indexer.lexical import BOS, EOS, TOKEN as _TOKEN


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
    """A Witten-Bell interpolated bigram model over a vocabulary of `vocab_size` words, whose
    ids run over [0, `size`) (`size` < `vocab_size` when only the words some model saw have ids
    of their own and every other word shares the last id, counted nowhere: what a hashed corpus
    needs, with the same probabilities)."""

    vocab_size: int
    unigram_counts: np.ndarray
    bigram_keys: np.ndarray
    bigram_counts: np.ndarray
    history_counts: np.ndarray
    history_types: np.ndarray
    size: int = 0

    def __post_init__(self) -> None:
        self.size = int(self.size or self.vocab_size)

    @classmethod
    def fit(cls, ids: np.ndarray, lengths: np.ndarray, vocab_size: int,
            size: int | None = None) -> "BigramLM":
        return cls.fit_pairs(*_bigrams(ids, lengths), vocab_size, size)

    @classmethod
    def fit_pairs(cls, hist: np.ndarray, word: np.ndarray, vocab_size: int,
                  size: int | None = None) -> "BigramLM":
        """Fit on the (history, word) pair of every predicted token."""
        S = int(size or vocab_size)
        unigram = np.bincount(word, minlength=S).astype(np.float64)
        keys, counts = np.unique(hist * S + word, return_counts=True)
        history_counts = np.bincount(hist, minlength=S).astype(np.float64)
        history_types = np.bincount(keys // S, minlength=S).astype(np.float64)
        return cls(int(vocab_size), unigram, keys, counts.astype(np.float64), history_counts,
                   history_types, S)

    def log2_probs(self, hist: np.ndarray, word: np.ndarray) -> np.ndarray:
        """log2 P(word | hist) for arrays of ids (ids >= `size` are unknown words)."""
        V, S = self.vocab_size, self.size
        known_w = word < S
        w = np.where(known_w, word, 0)
        h = np.where(hist < S, hist, 0)
        c_w = np.where(known_w, self.unigram_counts[w], 0.0)
        p1 = (c_w + 1.0) / (self.unigram_counts.sum() + V + 1.0)
        c_h = np.where(hist < S, self.history_counts[h], 0.0)
        t_h = np.where(hist < S, self.history_types[h], 0.0)
        keys = h * S + w
        at = np.minimum(np.searchsorted(self.bigram_keys, keys), len(self.bigram_keys) - 1)
        found = known_w & (hist < S) & (self.bigram_keys[at] == keys)
        c_hw = np.where(found, self.bigram_counts[at], 0.0)
        seen = c_h > 0
        p = np.where(seen, (c_hw + t_h * p1) / np.where(seen, c_h + t_h, 1.0), p1)
        return np.log2(p)

    def cross_entropy(self, ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Per-sentence mean -log2 P of its predicted tokens."""
        hist, word = _bigrams(ids, lengths)
        return per_sentence(self.log2_probs(hist, word), lengths - 1)


def per_sentence(logp: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """Cross-entropy of each sentence from the log2 probability of each of its predicted
    tokens (`predicted`: how many each sentence has, all > 0)."""
    starts = np.concatenate(([0], np.cumsum(predicted)[:-1]))
    return (-np.add.reduceat(logp, starts) / predicted).astype(np.float32)


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


_CHUNK_SENTENCES = 1 << 20


def moore_lewis_lexicon(lexicon, task_texts: list[str], seed: int = 0,
                        extra_words: np.ndarray | None = None
                        ) -> tuple[np.ndarray, np.ndarray]:
    """`moore_lewis_scores` of every corpus sentence from an index's stored lexical ids
    (`tapt.indexer.lexical.Lexicon`: hashed words and bigram types), without reading or
    tokenising the corpus. The same numbers as `moore_lewis_scores` with a vocabulary of the
    corpus (up to 64-bit hash collisions): every word no model saw shares one id with zero
    counts, and the vocabulary size counts every corpus word.

    Args:
        lexicon: The index's lexicon.
        task_texts: The task's sentences.
        seed: Seed of the general LM's sample of corpus sentences.
        extra_words: Hashes of words outside the corpus that earlier tasks added to a shared
            vocabulary (`CorpusCache(share_vocabulary=True)`); None for a vocabulary of its own.

    Returns:
        The scores, and the task's words outside the corpus (with `extra_words`).
    """
    from tapt.indexer.lexical import hash_words, words

    if not task_texts:
        raise ValueError("Moore-Lewis needs the task's text")
    tokenised = [words(t) for t in task_texts]
    unique_words = sorted({w for ws in tokenised for w in ws})
    hashes = dict(zip(unique_words, hash_words(unique_words).tolist()))
    n = int(lexicon.row_offsets[-1])
    sample = np.sort(np.random.default_rng(seed).choice(n, size=min(len(task_texts), n),
                                                        replace=False))
    s_hist, s_word, _ = lexicon.pairs(sample)
    task_hashes = np.fromiter(hashes.values(), dtype=np.uint64, count=len(hashes))
    new = lexicon.new_words(task_hashes)
    if extra_words is not None:
        new = np.union1d(extra_words, new).astype(np.uint64)
    vocab_size = 2 + len(lexicon.vocabulary) + len(new)
    known = np.unique(np.concatenate([task_hashes, s_hist, s_word]))
    known = known[known > EOS]
    other = 2 + len(known)
    size = other + 1

    def dense(h: np.ndarray) -> np.ndarray:
        h = np.asarray(h, dtype=np.uint64)
        at = np.minimum(np.searchsorted(known, h), max(len(known) - 1, 0))
        hit = (known[at] == h) if len(known) else np.zeros(len(h), dtype=bool)
        out = np.where(hit, at + 2, other)
        out[h == BOS] = BOS
        out[h == EOS] = EOS
        return out.astype(np.int64)

    task_ids, task_len = [], []
    for ws in tokenised:
        task_ids += [BOS, *(hashes[w] for w in ws), EOS]
        task_len.append(len(ws) + 2)
    in_lm = BigramLM.fit(dense(np.asarray(task_ids, dtype=np.uint64)),
                         np.asarray(task_len, dtype=np.int64), vocab_size, size)
    general = BigramLM.fit_pairs(dense(s_hist), dense(s_word), vocab_size, size)
    scores = np.empty(n, dtype=np.float32)
    for shard, offset in zip(lexicon.shards, lexicon.row_offsets[:-1].tolist()):
        mapping = dense(np.asarray(shard.vocab))
        pairs = np.asarray(shard.bigrams)
        hist, word = mapping[pairs[:, 0]], mapping[pairs[:, 1]]
        lp_in, lp_gen = in_lm.log2_probs(hist, word), general.log2_probs(hist, word)
        offsets = np.asarray(shard.offsets)
        for lo in range(0, len(shard), _CHUNK_SENTENCES):
            hi = min(len(shard), lo + _CHUNK_SENTENCES)
            types = np.asarray(shard.lexical[offsets[lo]:offsets[hi]])
            predicted = np.diff(offsets[lo:hi + 1])
            scores[offset + lo:offset + hi] = (per_sentence(lp_gen[types], predicted)
                                               - per_sentence(lp_in[types], predicted))
    return scores, new
