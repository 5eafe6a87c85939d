"""What text-scanning methods need, stored at build time: stable hashed word ids and bigram types.

Moore-Lewis (and `fused`, which uses it) scores every corpus sentence by word-bigram language
models fitted per task. Tokenising the whole corpus per task costs minutes at 10M sentences, so
each shard stores, once, for its sentences:

    vocab.npy            uint64, local word id -> 64-bit hash of the word (ids 0 and 1 are the
                         sentence boundaries <s> and </s>, hashes 0 and 1)
    bigrams.npy          int32 (types x 2): every distinct (history, word) pair of local ids
    lexical.npy          int32, per predicted token (each word and </s>) of every sentence, in
                         order: its bigram type
    lexical_offsets.npy  int64 (rows + 1): CSR offsets of each sentence's predicted tokens

Words are what `retriever.scoring.ngram_lm` always used: `\\w+|[^\\w\\s]` over the lowercased text. A word's
hash is the first 8 bytes of its BLAKE2b digest (stable across processes and machines; two words
share a hash with probability ~3e-6 for 10M distinct words, see docs/scale.md). The index keeps the
sorted union of all shards' word hashes (top-level `vocab.npy`): the language models' vocabulary
size counts every corpus word, as before.

Document identity (`doc_hash`) lives here too: `index add` skips documents whose normalised
sentences an index already holds, and each shard stores its documents' hashes (`dochash.npy`).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import unicodedata
from array import array
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from tapt.util import spill
from tapt.util.cache import warn_once
from tapt.util.machine import usable_cores
from tapt.util.progress import report_step

TOKEN = re.compile(r"\w+|[^\w\s]")
BOS, EOS = 0, 1
_LOW32 = np.int64(0xFFFFFFFF)

# Invisible characters that make two renderings of one text differ byte for byte.
_ZERO_WIDTH = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad"))


def normalise_for_identity(text: str) -> str:
    """The form two texts are compared in: Unicode NFC, without zero-width characters and
    soft hyphens. Only for duplicate detection; stored text stays as the corpus gave it."""
    return unicodedata.normalize("NFC", text).translate(_ZERO_WIDTH)


def doc_hash(sentences: Iterable[str]) -> bytes:
    """Identity of a document's content: its sentences, in order, normalised (NFC, no
    zero-width characters), so Unicode variants of one document are one document."""
    joined = "\n".join(normalise_for_identity(s) for s in sentences)
    return hashlib.sha256(joined.encode("utf-8")).digest()[:16]


def words(text: str) -> list[str]:
    """The language models' tokens of a text."""
    return TOKEN.findall(text.lower())


def word_hash(word: str) -> int:
    """A stable 64-bit id of a word (never 0 or 1, the sentence boundaries)."""
    value = int.from_bytes(hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest(), "little")
    return value if value > 1 else value + 2


def hash_words(unique_words: Iterable[str]) -> np.ndarray:
    return np.fromiter((word_hash(w) for w in unique_words), dtype=np.uint64)


class LexicalWriter:
    """Collects the words of a shard's sentences, in row order, and writes the four arrays.

    What it holds does not grow with the sentences: each block of `BLOCK` tokens is reduced to
    its distinct word pairs (one 64-bit key each: history id above word id, sorted) and, per
    predicted token, the position of its pair among them (int32), both appended to unlinked
    scratch files (`util.spill.scratch_dir`) with each sentence's predicted-token count; only
    the distinct words and the distinct pairs so far (a sorted array, merged block by block)
    stay in memory. `write` then maps each block's pairs to their place among all pairs (one
    search of a sorted block of pairs) and its tokens through them. The arrays are those
    `pairs_to_arrays` makes of the whole stream at once, value for value (`arrays` returns them
    in memory, for a few sentences).
    """

    BLOCK = 1 << 22

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._stream = array("i")       # <s> w1 .. wm </s> of the block's sentences, local ids
        self._lengths = array("q")      # predicted tokens per sentence of the block (m + 1)
        self._types = np.empty(0, dtype=np.int64)    # distinct pair keys so far, sorted
        self._spill = None                             # scratch files, made with a first block
        self._blocks: list[tuple[int, int, int]] = []  # (sentences, tokens, pairs) per block
        self.sentences = 0

    def add(self, text: str) -> None:
        get = self._ids.setdefault
        ids = [get(w, len(self._ids) + 2) for w in words(text)]
        self._stream.append(BOS)
        self._stream.extend(ids)
        self._stream.append(EOS)
        self._lengths.append(len(ids) + 1)
        self.sentences += 1
        if len(self._stream) >= self.BLOCK:
            self._flush()

    def _flush(self) -> None:
        """The block to the scratch files (its sorted distinct pairs, each token's place among
        them, each sentence's count); its pairs merged into the sorted ones (two sorted runs:
        the stable sort merges them in linear time)."""
        if not self._lengths:
            return
        stream = np.frombuffer(self._stream, dtype=np.int32).astype(np.int64)
        lengths = np.frombuffer(self._lengths, dtype=np.int64)
        pairs, places = np.unique(_pair_keys(stream, lengths), return_inverse=True)
        if self._spill is None:
            self._spill = {name: _scratch() for name in ("pairs", "places", "counts")}
        self._spill["pairs"].write(pairs.tobytes())
        self._spill["places"].write(places.astype(np.int32).tobytes())
        self._spill["counts"].write(lengths.tobytes())
        self._blocks.append((len(lengths), len(places), len(pairs)))
        merged = np.concatenate([self._types, pairs])
        merged.sort(kind="stable")
        keep = np.ones(len(merged), dtype=bool)
        np.not_equal(merged[1:], merged[:-1], out=keep[1:])
        self._types = merged[keep]
        self._stream, self._lengths = array("i"), array("q")

    def _vocab(self) -> np.ndarray:
        return np.concatenate([np.array([0, 1], dtype=np.uint64), hash_words(self._ids)])

    def arrays(self) -> dict[str, np.ndarray]:
        """vocab, bigrams, lexical, lexical_offsets (see the module docstring), in memory."""
        if self._spill is not None:
            raise ValueError("arrays() holds a few sentences in memory; write() a shard")
        stream = np.frombuffer(self._stream, dtype=np.int32).astype(np.int64)
        lengths = np.frombuffer(self._lengths, dtype=np.int64)
        return pairs_to_arrays(stream, lengths, self._vocab())

    def write(self, paths: dict[str, Path]) -> None:
        """Write the arrays to `paths` (by "vocab", "bigrams", "lexical", "lexical_offsets"),
        each under a temporary name renamed into place; the scratch files are dropped."""
        from tapt.indexer.store.npy import write_npy
        from tapt.util.files import atomic_write

        self._flush()
        types = self._types
        try:
            for name, array_ in (("vocab", self._vocab()), ("bigrams", np.stack(
                    [types >> 32, types & _LOW32], axis=1).astype(np.int32))):
                with atomic_write(paths[name], "wb") as fh:
                    write_npy(fh, array_)
            spill = self._spill or {}
            for fh in spill.values():
                fh.flush()
                fh.seek(0)
            with _appending(paths["lexical_offsets"], np.int64) as offsets, \
                    _appending(paths["lexical"], np.int32) as lexical:
                offsets.append(np.zeros(1, dtype=np.int64))
                at = 0
                for sentences, tokens, pairs in self._blocks:
                    ends = np.cumsum(_read(spill["counts"], np.int64, sentences)) + at
                    offsets.append(ends)
                    at = int(ends[-1])
                    ids = np.searchsorted(types, _read(spill["pairs"], np.int64, pairs))
                    lexical.append(ids.astype(np.int32)[_read(spill["places"], np.int32,
                                                              tokens)])
        finally:
            for fh in (self._spill or {}).values():
                fh.close()
            self._spill, self._blocks = None, []


def _read(fh, dtype: type, count: int) -> np.ndarray:
    """The next `count` values of a scratch file."""
    size = np.dtype(dtype).itemsize
    return np.frombuffer(fh.read(count * size), dtype=dtype, count=count)


def _pair_keys(stream: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """One 64-bit key (history id << 32 | word id) per predicted token of sentences given as a
    stream of local ids (<s> w.. </s> each) and the predicted-token count of each."""
    offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
    starts = offsets[:-1] + np.arange(len(lengths), dtype=np.int64)   # <s> of each sentence
    predicted = np.ones(len(stream), dtype=bool)
    predicted[starts] = False
    pos = np.flatnonzero(predicted)
    return (stream[pos - 1] << 32) | stream[pos]


def _scratch():
    """An unlinked scratch file for a writer's spilled blocks (`util.spill.scratch_dir`); in
    memory, with one warning, where none can be made there (as `util.spill.empty` does)."""
    import io
    import tempfile

    where = spill.scratch_dir()
    try:
        return tempfile.TemporaryFile(dir=where, prefix="tapt-lexical-")
    except OSError as exc:
        warn_once(f"spill:{where}", "no scratch file in %s (%s): keeping the lexical ids' "
                  "blocks in memory (set TAPT_SCRATCH_DIR to a directory with room)", where,
                  exc.strerror or exc)
        return io.BytesIO()


class _appending:  # noqa: N801 - used like a function, as a context manager
    """`NpyAppender` to a temporary sibling of `path`, renamed into place on success."""

    def __init__(self, path: Path, dtype: type) -> None:
        from tapt.indexer.store.npy import NpyAppender

        self.path, self.temp = path, path.parent / f".{path.name}.tmp-{os.getpid()}"
        self.out = NpyAppender(self.temp, dtype)

    def __enter__(self):
        return self.out

    def __exit__(self, kind, *exc) -> None:
        try:
            if kind is None:
                self.out.sync()
            self.out.close()
            if kind is None:
                os.replace(self.temp, self.path)
        finally:
            self.temp.unlink(missing_ok=True)


def pairs_to_arrays(stream: np.ndarray, lengths: np.ndarray, vocab: np.ndarray
                    ) -> dict[str, np.ndarray]:
    """The stored arrays of sentences given as one stream of local ids (<s> w.. </s> each) and
    the number of predicted tokens of each."""
    offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
    types, inverse = np.unique(_pair_keys(stream, lengths), return_inverse=True)
    bigrams = np.stack([types >> 32, types & _LOW32], axis=1).astype(np.int32)
    return {"vocab": vocab, "bigrams": bigrams,
            "lexical": inverse.astype(np.int32).reshape(-1),
            "lexical_offsets": offsets}


def union_vocabulary(vocabs: Iterable[np.ndarray]) -> np.ndarray:
    """The sorted distinct word hashes of several shards (boundaries left out), in memory."""
    out = np.empty(0, dtype=np.uint64)
    for vocab in vocabs:
        out = np.union1d(out, np.asarray(vocab[2:], dtype=np.uint64))
    return out.astype(np.uint64)


# words read at a time, how many buckets (by the hashes' top bits) `write_union` splits into,
# and up to how many words in all it makes the union in memory instead (one sort: below that,
# creating 256 bucket files costs more time than the sort; benchmarks/vocab_union.py)
_UNION_CHUNK = 1 << 22
_UNION_BUCKET_BITS = 8
_UNION_IN_MEMORY = 1 << 20


def write_union(path: Path, arrays: Iterable[np.ndarray]) -> int:
    """Write the sorted distinct values of several arrays of word hashes to `path` (.npy,
    uint64), in memory bounded by one bucket instead of the whole union.

    Up to 2^20 hashes in all, the union is made in memory. Above, the hashes (uniform 64-bit
    values) are split by their top 8 bits into 256 bucket files in a folder beside `path`, each
    bucket is made distinct alone (the union's order is the buckets' order). The result is
    written under a temporary name, then renamed. Time grows with the words read, not with the
    number of arrays times the union (as repeated `np.union1d` does). What `union_vocabulary`
    returns, value for value.

    Args:
        path: The file to write (replaced if it exists).
        arrays: The hashes (e.g. each shard's `vocab[2:]`, memory-mapped, and an earlier union).

    Returns:
        How many distinct hashes were written.
    """
    from tapt.indexer.store.npy import NpyAppender, write_npy
    from tapt.util.files import atomic_write

    arrays = list(arrays)
    if sum(len(a) for a in arrays) <= _UNION_IN_MEMORY:
        words = np.unique(np.concatenate([np.asarray(a, dtype=np.uint64) for a in arrays]
                                         or [np.empty(0, np.uint64)]))
        with atomic_write(path, "wb") as fh:
            write_npy(fh, words)
        return len(words)
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
    buckets = 1 << _UNION_BUCKET_BITS
    shift = np.uint64(64 - _UNION_BUCKET_BITS)
    folder = path.parent / f".{path.name}.buckets-{os.getpid()}"
    folder.mkdir()
    try:
        files = [NpyAppender(folder / f"{b:03d}.npy", np.uint64) for b in range(buckets)]
        try:
            for values in arrays:
                for lo in range(0, len(values), _UNION_CHUNK):
                    block = np.unique(np.asarray(values[lo:lo + _UNION_CHUNK], dtype=np.uint64))
                    # sorted, so each bucket's hashes are one run of the block
                    edges = np.searchsorted(block >> shift, np.arange(buckets + 1,
                                                                      dtype=np.uint64))
                    for b in np.flatnonzero(np.diff(edges)).tolist():
                        files[b].append(block[edges[b]:edges[b + 1]])
        finally:
            for f in files:
                f.close()
        written = 0
        out = NpyAppender(tmp, np.uint64)
        try:
            for b in range(buckets):
                words = np.unique(np.load(folder / f"{b:03d}.npy"))
                out.append(words)
                written += len(words)
            out.sync()
        finally:
            out.close()
        os.replace(tmp, path)
        return written
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        tmp.unlink(missing_ok=True)


class ShardLexicon:
    """One shard's stored lexical arrays (memory-mapped)."""

    def __init__(self, directory: Path | None, vocab: np.ndarray, bigrams: np.ndarray,
                 lexical: np.ndarray, offsets: np.ndarray) -> None:
        self.directory = directory
        self.vocab, self.bigrams, self.lexical, self.offsets = vocab, bigrams, lexical, offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def sentences(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(history hashes, word hashes) of every predicted token of the local `rows`, in order,
        and the predicted-token count of each row."""
        rows = np.asarray(rows, dtype=np.int64)
        lo, hi = self.offsets[rows], self.offsets[rows + 1]
        lengths = hi - lo
        base = np.repeat(lo - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
        types = np.asarray(self.lexical[base + np.arange(int(lengths.sum()))], dtype=np.int64)
        pairs = np.asarray(self.bigrams)[types]
        vocab = np.asarray(self.vocab)
        return vocab[pairs[:, 0]], vocab[pairs[:, 1]], lengths


class Lexicon:
    """Every shard's lexical ids under global row ids, and the corpus vocabulary."""

    def __init__(self, shards: list[ShardLexicon], row_offsets: np.ndarray,
                 vocabulary: np.ndarray) -> None:
        self.shards = shards
        self.row_offsets = np.asarray(row_offsets, dtype=np.int64)
        self.vocabulary = vocabulary

    @classmethod
    def of_texts(cls, texts: Iterable[str]) -> "Lexicon":
        """The lexicon of sentences held in memory (tokenised here, as a build stores them)."""
        writer = LexicalWriter()
        for text in texts:
            writer.add(text)
        a = writer.arrays()
        shard = ShardLexicon(None, a["vocab"], a["bigrams"], a["lexical"], a["lexical_offsets"])
        return cls([shard], np.array([0, len(shard)]), union_vocabulary([a["vocab"]]))

    def __len__(self) -> int:
        return int(self.row_offsets[-1])

    def map_shards(self, score_shard: Callable[[ShardLexicon], np.ndarray]) -> np.ndarray:
        """One float32 score per sentence: `score_shard` of every shard, in row order, shards
        scored side by side on this process's cores (their gathers and sums release the GIL;
        each shard's scores are the same as alone), so up to one shard's scoring memory per
        core is held at once.

        Args:
            score_shard: A thread-safe function of one shard's lexicon to the scores of its
                sentences; it runs in the caller's context (its progress steps, settings).

        Returns:
            (sentences,) float32 scores.
        """
        import contextvars
        from concurrent.futures import ThreadPoolExecutor

        out = spill.empty(len(self), np.float32)
        spans = list(zip(self.shards, self.row_offsets[:-1].tolist(),
                         self.row_offsets[1:].tolist()))

        def one(shard: ShardLexicon, start: int, stop: int) -> None:
            report_step(f"score the words of rows {start:,}-{stop:,}")
            out[start:stop] = score_shard(shard)

        workers = min(usable_cores(), len(spans))
        with ThreadPoolExecutor(max(1, workers), thread_name_prefix="tapt-lexicon") as pool:
            # a worker thread starts in an empty context: each shard runs in a copy of this one
            done = [pool.submit(contextvars.copy_context().run, one, *span) for span in spans]
            for future in done:
                future.result()
        return out

    def pairs(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(history hashes, word hashes, predicted tokens per row) of global `rows` (sorted
        ascending: the pairs come shard by shard)."""
        rows = np.asarray(rows, dtype=np.int64)
        shard = np.searchsorted(self.row_offsets, rows, side="right") - 1
        hist, word, lengths = [], [], []
        for s in np.unique(shard).tolist():
            h, w, n = self.shards[s].sentences(rows[shard == s] - self.row_offsets[s])
            hist.append(h)
            word.append(w)
            lengths.append(n)
        if not lengths:
            empty = np.empty(0, dtype=np.uint64)
            return empty, empty, np.empty(0, dtype=np.int64)
        return np.concatenate(hist), np.concatenate(word), np.concatenate(lengths)

    def new_words(self, hashes: np.ndarray) -> np.ndarray:
        """The distinct hashes among `hashes` that no corpus sentence holds."""
        unique = np.unique(np.asarray(hashes, dtype=np.uint64))
        at = np.minimum(np.searchsorted(self.vocabulary, unique), max(len(self.vocabulary) - 1, 0))
        held = (self.vocabulary[at] == unique) if len(self.vocabulary) else np.zeros(
            len(unique), dtype=bool)
        return unique[~held]


def open_lexicon(index) -> Lexicon:
    """The lexical arrays of an open index, checked (shapes, checksums by the index's policy,
    every stored id in range) before any method gathers through them."""
    from tapt.errors import IndexFormatError
    from tapt.indexer.store import integrity
    from tapt.indexer.store.manifest import BIGRAMS, LEXICAL, LEXICAL_OFFSETS, VOCAB, upgrade_hint
    from tapt.indexer.store.text_store import damaged

    label = index.path
    if index.format_version < 3:
        raise IndexFormatError(f"index {label} has no lexical ids (format "
                               f"{index.format_version}): {upgrade_hint(label, 2)}")
    shards = []
    for shard in index.shards:
        where = shard.extra["where"]
        arrays = {}
        mapped = shard.extra.get("mapped") or {}
        for name in (VOCAB, BIGRAMS, LEXICAL, LEXICAL_OFFSETS):
            path = shard.directory / name
            if name in mapped:        # mapped and checked when the index was opened
                arrays[name] = mapped[name]
                continue
            try:
                arrays[name] = np.load(path, mmap_mode="r", allow_pickle=False)
            except FileNotFoundError:
                raise IndexFormatError(f"index {label} is incomplete: {where}{name} is missing; "
                                       f"run tapt index verify {label}") from None
            except Exception as exc:  # noqa: BLE001 - numpy's header parser raises many kinds
                raise damaged(label, f"{where}{name} cannot be read ({type(exc).__name__})",
                              exc) from exc
            integrity.check_checksum(path, shard.extra["checksums"].get(name), where + name,
                                     label)
        vocab, bigrams = arrays[VOCAB], arrays[BIGRAMS]
        lexical, offsets = arrays[LEXICAL], arrays[LEXICAL_OFFSETS]
        problem = None
        if vocab.dtype != np.uint64 or vocab.ndim != 1 or len(vocab) < 2:
            problem = f"{VOCAB} holds {vocab.dtype} {vocab.shape}"
        elif bigrams.dtype != np.int32 or bigrams.ndim != 2 or bigrams.shape[1] != 2:
            problem = f"{BIGRAMS} holds {bigrams.dtype} {bigrams.shape}"
        elif offsets.dtype != np.int64 or offsets.shape != (shard.rows + 1,):
            problem = f"{LEXICAL_OFFSETS} holds {offsets.dtype} {offsets.shape}"
        elif lexical.dtype != np.int32 or lexical.ndim != 1 or len(lexical) != offsets[-1]:
            problem = f"{LEXICAL} holds {lexical.dtype} {lexical.shape}"
        elif offsets[0] != 0 or (np.diff(offsets) < 1).any():
            problem = f"{LEXICAL_OFFSETS} do not rise from 0"
        elif len(bigrams) and (bigrams.min() < 0 or bigrams.max() >= len(vocab)):
            problem = f"{BIGRAMS} names words that do not exist"
        elif len(lexical) and (lexical.min() < 0 or lexical.max() >= len(bigrams)):
            problem = f"{LEXICAL} names bigrams that do not exist"
        if problem:
            raise damaged(label, f"{where}{problem}")
        shards.append(ShardLexicon(shard.directory, vocab, bigrams, lexical, offsets))
    path = index._base / VOCAB
    vocabulary = getattr(index, "vocabulary", None)   # mapped when the index was opened
    try:
        if vocabulary is None:
            vocabulary = np.load(path, mmap_mode="r", allow_pickle=False)
    except FileNotFoundError:
        raise IndexFormatError(f"index {label} is incomplete: {VOCAB} is missing; run tapt index "
                               f"verify {label}") from None
    except Exception as exc:  # noqa: BLE001
        raise damaged(label, f"{VOCAB} cannot be read ({type(exc).__name__})", exc) from exc
    if path.is_file():    # else another command swapped in a new generation: checked on open
        integrity.check_checksum(path, (index.manifest.get("checksums") or {}).get(VOCAB),
                                 VOCAB, label, force=True)
    if vocabulary.dtype != np.uint64 or vocabulary.ndim != 1:
        raise damaged(label, f"{VOCAB} holds {vocabulary.dtype} {vocabulary.shape}")
    return Lexicon(shards, index.row_offsets, np.asarray(vocabulary))
