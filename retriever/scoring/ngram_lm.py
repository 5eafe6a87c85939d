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
from functools import cached_property
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from tapt.indexer.reading.lexical import BOS, EOS
from tapt.indexer.reading.lexical import TOKEN as _TOKEN
from tapt.util.progress import report_step


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
        """log2 P(word | hist) for arrays of ids (ids >= `size` are unknown words).

        The per-id terms (add-one unigram, history count and types) are computed once per id
        and gathered; the bigram table is searched only for pairs whose history and word both
        occur in the model (no other pair can be in it)."""
        S = self.size
        unknown_w, unknown_h = word >= S, hist >= S
        w = np.where(unknown_w, 0, word) if unknown_w.any() else word
        h = np.where(unknown_h, 0, hist) if unknown_h.any() else hist
        p1 = self._unigram_p1[w]
        c_h, t_h = self.history_counts[h], self.history_types[h]
        if unknown_w.any():
            p1[unknown_w] = self._unknown_p1()
        if unknown_h.any():
            c_h[unknown_h] = 0.0
            t_h[unknown_h] = 0.0
        c_hw = np.zeros(len(w), dtype=np.float64)
        maybe = np.flatnonzero((c_h > 0) & (self.unigram_counts[w] > 0) & ~unknown_w)
        if len(maybe) and len(self.bigram_keys):
            keys = h[maybe] * S + w[maybe]
            at = np.minimum(np.searchsorted(self.bigram_keys, keys), len(self.bigram_keys) - 1)
            found = self.bigram_keys[at] == keys
            c_hw[maybe[found]] = self.bigram_counts[at[found]]
        seen = c_h > 0
        p = np.where(seen, (c_hw + t_h * p1) / np.where(seen, c_h + t_h, 1.0), p1)
        return np.log2(p)

    def split_log2(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(log2 P1(w), log2 T(w) / (c(w) + T(w)), 0 for a history never seen) of each of `ids`:
        `log2_probs(v, w)` is their sum, the second of v and the first of w, for every pair
        the model never counted (c(v, w) = 0, which is most pairs of a corpus)."""
        word = self.unigram_log2(ids)
        known = ids < self.size
        at = np.where(known, ids, 0)
        c_h = np.where(known, self.history_counts[at], 0.0)
        t_h = np.where(known, self.history_types[at], 0.0)
        seen = c_h > 0
        return word, np.where(seen, np.log2(np.where(seen, t_h, 1.0) / np.where(seen, c_h + t_h,
                                                                              1.0)), 0.0)

    @cached_property
    def _unigram_p1(self) -> np.ndarray:
        """The add-one unigram probability of every model id."""
        return (self.unigram_counts + 1.0) / (self.unigram_counts.sum() + self.vocab_size + 1.0)

    def _unknown_p1(self) -> float:
        return 1.0 / (self.unigram_counts.sum() + self.vocab_size + 1.0)

    def unigram_log2(self, word: np.ndarray) -> np.ndarray:
        """log2 P1(word), the add-one unigram alone (ids >= `size` are unknown words)."""
        known = word < self.size
        return np.log2(np.where(known, self._unigram_p1[np.where(known, word, 0)],
                                self._unknown_p1()))

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


# sentences per run of a shard's scoring (their tokens' gathers take ~40 bytes a token), and
# bigram types per run of its per-type table (`type_runs`)
_CHUNK_SENTENCES = 1 << 16
TYPE_RUN = 1 << 15


def general_sample_size(in_sentences: int, corpus_sentences: int) -> int:
    """Random corpus sentences the general LM is fitted on: as many as the in-domain side
    has, at most the whole corpus."""
    return min(int(in_sentences), int(corpus_sentences))


def type_runs(pairs, size: int) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """(first type, history ids, word ids) of consecutive runs of `size` of a shard's bigram
    types (its (n, 2) `bigrams`), the ids as intp arrays in two buffers that the next run
    overwrites. Runs of `TYPE_RUN` keep a pass's temporaries in the core's cache: whole-shard
    temporaries (26-52 MB each) made the per-type tables of the lexical scorers 2-3x slower
    (measured on shards of 6.5M types)."""
    hist, word = np.empty(size, dtype=np.intp), np.empty(size, dtype=np.intp)
    for lo in range(0, len(pairs), size):
        run = pairs[lo:lo + size]
        h, w = hist[:len(run)], word[:len(run)]
        h[...] = run[:, 0]
        w[...] = run[:, 1]
        yield lo, h, w


def sentence_sums(shard, per_type: np.ndarray) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """(first local row, float64 sum of `per_type` over each sentence's predicted tokens, their
    counts) of runs of up to 2^16 of a shard's sentences: one gather of 8 bytes per token and
    one `np.add.reduceat` (every sentence predicts at least its `</s>`). `per_type` has one
    value per bigram type of the shard."""
    if len(per_type) != len(shard.bigrams):
        raise ValueError(f"{len(per_type)} values for {len(shard.bigrams)} bigram types")
    offsets = np.asarray(shard.offsets)
    starts = np.arange(0, len(shard), _CHUNK_SENTENCES)
    ends = np.minimum(starts + _CHUNK_SENTENCES, len(shard))
    # one buffer for every run's gathered values: a new ~8 MB array per run is fresh memory the
    # kernel maps page by page (the gathers of a 16M-token shard took 0.21 s so, 0.13 s into
    # one buffer). The lexicon's ids were checked in range when it was opened (`open_lexicon`):
    # the gather need not check them again (its checking mode writes through a buffer of its own)
    values = np.empty(int((offsets[ends] - offsets[starts]).max(initial=0)), dtype=per_type.dtype)
    for lo, hi in zip(starts.tolist(), ends.tolist()):
        types = np.asarray(shard.lexical[offsets[lo]:offsets[hi]])   # int32: `take` as it is
        lengths = np.diff(offsets[lo:hi + 1])
        run = np.take(per_type, types, mode="clip", out=values[:len(types)])
        if len(run) and lengths.min() > 0:
            sums = np.add.reduceat(run, offsets[lo:hi] - offsets[lo])
        else:      # a sentence without tokens (none is stored so): counted the slow way
            sums = np.bincount(np.repeat(np.arange(hi - lo), lengths), weights=run,
                               minlength=hi - lo)
        yield lo, sums, lengths


class ShardScorer:
    """A scorer of every stored sentence from an index's lexical ids, shard by shard: a subclass
    has a `lexicon` and implements `shard_parts`."""

    lexicon: Any

    def shard_parts(self, shard) -> Iterator[tuple[int, np.ndarray]]:
        raise NotImplementedError

    def __getstate__(self) -> dict[str, Any]:
        # sent to the actors of a served index without the driver's memory-mapped lexicon
        # (each actor scores its shards from its own): what is sent does not grow with the rows
        return {**self.__dict__, "lexicon": None}

    def score_all(self, apply: Callable[[Callable[[Any], np.ndarray]], np.ndarray] | None = None
                  ) -> np.ndarray:
        """The score of every corpus sentence (higher = more task-like), shard by shard.

        Args:
            apply: Runs `score_shard` on every shard and returns the scores in row order
                (default: the lexicon's own `map_shards`; a served index passes its actors').

        Returns:
            (sentences,) float32 scores.
        """
        return (apply or self.lexicon.map_shards)(self.score_shard)

    def score_shard(self, shard) -> np.ndarray:
        """The scores of one shard's sentences (`lexical.ShardLexicon`), in its row order."""
        scores = np.empty(len(shard), dtype=np.float32)
        for lo, part in self.shard_parts(shard):
            scores[lo:lo + len(part)] = part
        return scores


class HashedLMs(ShardScorer):
    """Moore-Lewis's two language models over an index's stored lexical ids
    (`tapt.indexer.reading.lexical.Lexicon`: hashed words and bigram types), fitted and applied without
    reading or tokenising the corpus.

    The in-domain model is fitted on the task (plus the corpus rows `extra_rows`), the general
    one on a seeded random sample of as many corpus sentences. The numbers are those of models
    over a vocabulary of the corpus's and the task's words (up to 64-bit hash collisions): every
    word no model saw shares one id with zero counts, and the vocabulary size counts every
    corpus word.

    Args:
        lexicon: The corpus's lexicon.
        task_texts: The task's sentences.
        extra_rows: Corpus rows added to the in-domain side (pseudo-relevance feedback).
        seed: Seed of the general model's sample.
        extra_words: Hashes of words outside the corpus that earlier tasks added to a shared
            vocabulary (`CorpusCache(share_vocabulary=True)`); None for a vocabulary of its own.
        order: 2 scores with the bigram models, 1 with their add-one unigrams.

    Raises:
        ValueError: no task text.
    """

    def __init__(self, lexicon, task_texts: list[str], extra_rows: np.ndarray = (),
                 seed: int = 0, extra_words: np.ndarray | None = None, order: int = 2) -> None:
        if not task_texts:
            raise ValueError("Moore-Lewis needs the task's text")
        self.lexicon, self.order = lexicon, order
        t_hist, t_word, _ = self.text_pairs(task_texts)
        extra_rows = np.unique(np.asarray(extra_rows, dtype=np.int64))
        x_hist, x_word, _ = lexicon.pairs(extra_rows)
        n = len(lexicon)
        self.in_sentences = len(task_texts) + len(extra_rows)
        self.general_sentences = general_sample_size(self.in_sentences, n)
        sample = np.sort(np.random.default_rng(seed).choice(n, size=self.general_sentences,
                                                            replace=False))
        s_hist, s_word, _ = lexicon.pairs(sample)
        self.new = lexicon.new_words(t_word[t_word > EOS])
        if extra_words is not None:
            self.new = np.union1d(extra_words, self.new).astype(np.uint64)
        vocab_size = 2 + len(lexicon.vocabulary) + len(self.new)
        known = np.unique(np.concatenate([t_word, x_word, s_hist, s_word]))
        self._known = known[known > EOS]
        size = len(self._known) + 3   # <s>, </s>, the words some model saw, one for the others
        self.in_lm = BigramLM.fit_pairs(self.dense(np.concatenate([t_hist, x_hist])),
                                        self.dense(np.concatenate([t_word, x_word])),
                                        vocab_size, size)
        self.general = BigramLM.fit_pairs(self.dense(s_hist), self.dense(s_word), vocab_size,
                                          size)

    @staticmethod
    def text_pairs(texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(history hash, word hash) of every predicted token of `texts`, and how many tokens
        each text predicts."""
        from tapt.indexer.reading.lexical import hash_words, words

        tokenised = [words(t) for t in texts]
        unique_words = sorted({w for ws in tokenised for w in ws})
        hashes = dict(zip(unique_words, hash_words(unique_words).tolist()))
        ids, lengths = [], []
        for ws in tokenised:
            ids += [BOS, *(hashes[w] for w in ws), EOS]
            lengths.append(len(ws) + 2)
        lengths = np.asarray(lengths, dtype=np.int64)
        return (*_bigrams(np.asarray(ids, dtype=np.uint64), lengths), lengths - 1)

    def dense(self, hashes: np.ndarray) -> np.ndarray:
        """Model ids of word hashes (the words no model saw share the last id)."""
        h = np.asarray(hashes, dtype=np.uint64)
        known = self._known
        at = np.minimum(np.searchsorted(known, h), max(len(known) - 1, 0))
        hit = (known[at] == h) if len(known) else np.zeros(len(h), dtype=bool)
        out = np.where(hit, at + 2, len(known) + 2)
        out[h == BOS] = BOS
        out[h == EOS] = EOS
        return out.astype(np.int64)

    def token_log2(self, hist: np.ndarray, word: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(log2 P_in, log2 P_general) of each predicted token (hashes)."""
        return self.model_log2(self.dense(hist), self.dense(word))

    def model_log2(self, h: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(log2 P_in, log2 P_general) of each predicted token (model ids, see `dense`)."""
        if self.order == 1:
            return self.in_lm.unigram_log2(w), self.general.unigram_log2(w)
        return self.in_lm.log2_probs(h, w), self.general.log2_probs(h, w)

    @staticmethod
    def _difference(lp_in: np.ndarray, lp_gen: np.ndarray, predicted: np.ndarray) -> np.ndarray:
        """H_general - H_in of each sentence: the mean of log2 P_in - log2 P_general over its
        predicted tokens (one float64 sum, then float32)."""
        return -per_sentence(lp_in - lp_gen, predicted)

    def _score(self, hist: np.ndarray, word: np.ndarray, predicted: np.ndarray) -> np.ndarray:
        return self._difference(*self.token_log2(hist, word), predicted)

    def shard_parts(self, shard) -> Iterator[tuple[int, np.ndarray]]:
        """(first local row, float32 scores) of consecutive runs of up to 2^16 of one shard's
        sentences, each scored when it is reached (`score_shard` in parts)."""
        # model ids of the shard's words once, not of both words of every bigram type
        ids, pairs = self.dense(np.asarray(shard.vocab)), shard.bigrams
        # log2 P_in - log2 P_general of every bigram type, whose mean over a sentence's tokens
        # is its score: one gather of 8 bytes per token (the two models' log-probabilities side
        # by side took 16, and two sums)
        gain = self._split_gains(ids, pairs)
        if gain is None:    # computed a run of types at a time: ~100 bytes a type of temporaries
            gain = np.empty(len(pairs), dtype=np.float64)
            for lo, hist, word in type_runs(pairs, TYPE_RUN):
                lp_in, lp_gen = self.model_log2(ids[hist], ids[word])
                gain[lo:lo + len(hist)] = lp_in - lp_gen
        for lo, sums, lengths in sentence_sums(shard, gain):
            yield lo, (sums / lengths).astype(np.float32)

    def _split_gains(self, ids: np.ndarray, pairs) -> np.ndarray | None:
        """Every bigram type's log2 P_in - log2 P_general from per-word terms
        (`BigramLM.split_log2`, two gathers a type), the pairs either model counted computed
        in full; None when the shard's types are not sorted by (history, word), which finding
        those pairs needs (a shard written by `pairs_to_arrays` always is). Beside the gains,
        a run of types at a time is held."""
        if self.order == 1:
            gain = self.in_lm.unigram_log2(ids) - self.general.unigram_log2(ids)
            return gain[np.asarray(pairs[:, 1])]
        width = np.int64(len(ids))
        wanted = [_counted_keys(lm, ids, width) for lm in (self.in_lm, self.general)]
        if any(w is None for w in wanted):
            return None
        counted_keys = np.union1d(*wanted)
        (w_in, h_in), (w_gen, h_gen) = self.in_lm.split_log2(ids), self.general.split_log2(ids)
        word_gain, history_gain = w_in - w_gen, h_in - h_gen
        gain = np.empty(len(pairs), dtype=np.float64)
        counted, last = [], -1
        keys, part = np.empty(TYPE_RUN, dtype=np.int64), np.empty(TYPE_RUN)
        for lo, hist, word in type_runs(pairs, TYPE_RUN):
            k = np.multiply(hist, width, out=keys[:len(hist)])
            k += word
            if k[0] <= last or not bool((k[1:] > k[:-1]).all()):
                return None
            last = int(k[-1])
            out = gain[lo:lo + len(k)]
            np.take(word_gain, word, out=out, mode="clip")         # ids checked on open
            out += np.take(history_gain, hist, out=part[:len(k)], mode="clip")
            inside = counted_keys[np.searchsorted(counted_keys, k[0]):
                                  np.searchsorted(counted_keys, last, side="right")]
            at = np.searchsorted(k, inside)
            counted.append(at[k[np.minimum(at, len(k) - 1)] == inside] + lo)
        rows = np.concatenate(counted) if counted else np.empty(0, dtype=np.int64)
        if len(rows):
            run = np.asarray(pairs[rows])
            lp_in, lp_gen = self.model_log2(ids[run[:, 0]], ids[run[:, 1]])
            gain[rows] = lp_in - lp_gen
        return gain

    def parts(self) -> Iterator[tuple[int, np.ndarray]]:
        """(first row, float32 scores) of consecutive runs of corpus sentences, shard by
        shard, each scored when it is reached (`score_all` in parts, same values)."""
        lexicon = self.lexicon
        for shard, start in zip(lexicon.shards, lexicon.row_offsets[:-1].tolist()):
            for lo, part in self.shard_parts(shard):
                yield start + lo, part

    def part_count(self) -> int:
        """How many parts `parts` yields."""
        return sum(-(-len(shard) // _CHUNK_SENTENCES) for shard in self.lexicon.shards)

    def score_rows(self, rows: np.ndarray) -> np.ndarray:
        """The scores of the corpus sentences `rows` (any order)."""
        rows = np.asarray(rows, dtype=np.int64)
        order = np.argsort(rows, kind="stable")
        hist, word, predicted = self.lexicon.pairs(rows[order])
        out = np.empty(len(rows), dtype=np.float32)
        out[order] = self._score(hist, word, predicted)
        return out

    def score_texts(self, texts: list[str]) -> np.ndarray:
        """The scores of texts outside the corpus."""
        return self._score(*self.text_pairs(texts))


def _counted_keys(lm: BigramLM, ids: np.ndarray, width: np.int64) -> np.ndarray | None:
    """The pairs `lm` counted as a shard's type keys (local history x `width` + local word),
    sorted; `ids`: the model id of each local word (the words no model saw share one id,
    which counts nothing). None if two counted words share an id."""
    at = np.minimum(ids, lm.size - 1)
    words = np.flatnonzero((ids < lm.size) & (lm.unigram_counts[at] + lm.history_counts[at] > 0))
    if len(np.unique(ids[words])) != len(words):
        return None
    local = np.full(lm.size, -1, dtype=np.int64)
    local[ids[words]] = words
    hist, word = local[lm.bigram_keys // lm.size], local[lm.bigram_keys % lm.size]
    return np.unique((hist * width + word)[(hist >= 0) & (word >= 0)])


def moore_lewis_lexicon(lexicon, task_texts: list[str], seed: int = 0,
                        extra_words: np.ndarray | None = None,
                        apply: Callable[[Callable[[Any], np.ndarray]], np.ndarray] | None = None
                        ) -> tuple[np.ndarray, np.ndarray]:
    """`moore_lewis_scores` of every corpus sentence from an index's stored lexical ids
    (`HashedLMs`, the task alone on the in-domain side; `apply`: see `HashedLMs.score_all`).

    Returns:
        The scores, and the task's words outside the corpus (with `extra_words`).
    """
    report_step("fit the task's and the corpus's word models")
    models = HashedLMs(lexicon, task_texts, seed=seed, extra_words=extra_words)
    return models.score_all(apply), models.new


def unigram_cross_entropy(lm: BigramLM, ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Per-sentence mean -log2 P1 of its predicted tokens under the model's add-one unigram alone
    (order 1: what a handful of task sentences can estimate without a history)."""
    _, word = _bigrams(ids, lengths)
    return per_sentence(lm.unigram_log2(word), lengths - 1)
