"""Tokenise once, sort by length, pad per batch: what the fast encoder paths feed their models.

A fast tokenizer's Rust backend tokenises all texts in chunks on every usable core (it releases
the GIL, so threads scale; offsets are not computed), then batches of similar length are padded
with numpy, so padding is minimal and nothing is tokenised twice. On a GPU this keeps the host
ahead of the model: one core tokenises ~20,000 short sentences a second
(`benchmarks/tokenize_speed.py`), far fewer than a GPU embeds.

A batch holds at most `batch_size` texts and, when `max_tokens` is given, at most that many
tokens after padding (rows x longest row), so short texts go in long batches and long texts in
short ones: every batch is a matrix product of about the same height, whatever the length mix.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple, Sequence

import numpy as np

from tapt.util.machine import usable_cores

CHUNK = 1024  # texts per backend call: large enough to amortise the call, small enough to spread
_backends: "weakref.WeakKeyDictionary[Any, dict[int | None, Any]]" = weakref.WeakKeyDictionary()
_backends_lock = threading.Lock()
_FIELDS = {"input_ids": "ids", "token_type_ids": "type_ids", "attention_mask": "attention_mask"}


# Text the Python call of some tokenizers treats apart from the backend (special tokens, case,
# accents, spacing, non-Latin scripts, control characters): the copy must tokenise it the same.
PROBES = ("", " ", "Hello, World!", "[CLS] [SEP] [PAD] [MASK] <s> </s> <pad> <unk> <|endoftext|>",
          "  leading and trailing spaces  ", "Ünïcödé àccents, ß and ﬁ ligatures",
          "中文字符, 日本語のテキスト and 한국어", "emoji 🤖🚀 and symbols ©®™ ½",
          "tabs\tand\nnewlines\r\n", "control\x00chars\x1b[31m", "don't stop pre-training",
          "MiXeD CaSe WoRdS", "word " * 80, "x" * 600)


class _Fast(NamedTuple):
    """A checked copy of a fast tokenizer's backend and what its encodings hold for certain."""

    backend: Any
    zero_types: bool  # token type ids all 0 for a single text (BERT-like templates)


def _fast(tokenizer: Any, max_length: int | None) -> _Fast | None:
    """A private copy of a fast tokenizer's Rust backend that truncates at `max_length` (None:
    never) and never pads, or None where the tokenizer has no such backend or its Python call
    does something the backend does not (checked once per tokenizer and length on `PROBES`).
    A copy, so the caller's tokenizer is not changed and threads share a tokenizer that
    nothing mutates. With it, what its encodings hold for every text: no padding, so an
    attention mask of ones; and, where the probes' type ids were all 0, type ids of 0 (a
    single text's type ids come from the post-processor's template, not from its words)."""
    if (not getattr(tokenizer, "is_fast", False)
            or getattr(tokenizer, "split_special_tokens", False)):
        return None
    source = getattr(tokenizer, "backend_tokenizer", None)
    if source is None or not hasattr(source, "to_str"):
        return None
    with _backends_lock:
        try:
            cached = _backends.setdefault(tokenizer, {})
        except TypeError:  # not weak-referenceable: build a copy per call
            cached = {}
        if max_length not in cached:
            from tokenizers import Tokenizer

            backend = Tokenizer.from_str(source.to_str())
            backend.no_padding()
            if max_length is None:
                backend.no_truncation()
            else:
                backend.enable_truncation(int(max_length), stride=0, strategy="longest_first",
                                          direction=getattr(tokenizer, "truncation_side", "right"))
            cached[max_length] = (_Fast(backend, _zero_types(backend))
                                  if _same_as_call(tokenizer, backend, max_length) else None)
        return cached[max_length]


def _zero_types(backend: Any) -> bool:
    """Whether `backend` gives every probe text type ids of 0 only (and no padding)."""
    probes = backend.encode_batch(list(PROBES), add_special_tokens=True)
    return all(not any(e.type_ids) and all(e.attention_mask) for e in probes)


def _same_as_call(tokenizer: Any, backend: Any, max_length: int | None) -> bool:
    """Whether `backend` gives `PROBES` the ids, type ids and masks of the tokenizer's call
    (made on a copy of the tokenizer, whose call reconfigures its own backend)."""
    import copy

    try:
        want = _call(copy.deepcopy(tokenizer), list(PROBES), max_length)
    except Exception:  # noqa: BLE001 - a tokenizer that cannot copy or call keeps its own path
        return False
    got = backend.encode_batch(list(PROBES), add_special_tokens=True)
    return all(name not in want or [getattr(e, field) for e in got] == list(want[name])
               for name, field in _FIELDS.items())


def _call(tokenizer: Any, texts: list[str], max_length: int | None) -> Any:
    """The tokenizer's own call: special tokens added, truncated at `max_length` (None: not)."""
    kwargs = {"truncation": True, "max_length": max_length} if max_length else {}
    return tokenizer(texts, add_special_tokens=True, **kwargs)


def _flat(fast: _Fast, texts: list[str], names: Sequence[str]
          ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """`texts` encoded by the backend: their lengths and one flat int64 array per name. Only
    the ids (and type ids a template may set) are read from Python lists, the slow part."""
    call = getattr(fast.backend, "encode_batch_fast", None) or fast.backend.encode_batch
    encodings = call(texts, add_special_tokens=True)
    lengths = np.fromiter((len(e) for e in encodings), dtype=np.int64, count=len(encodings))
    total = int(lengths.sum())
    columns = {}
    for name in names:
        if name == "attention_mask":
            columns[name] = np.ones(total, dtype=np.int64)
        elif name == "token_type_ids" and fast.zero_types:
            columns[name] = np.zeros(total, dtype=np.int64)
        else:
            field = _FIELDS[name]
            columns[name] = np.fromiter(
                itertools.chain.from_iterable(getattr(e, field) for e in encodings),
                dtype=np.int64, count=total)
    return lengths, columns


def _encode_chunks(fast: _Fast, texts: list[str], names: Sequence[str], threads: int | None
                   ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """`_flat` of `texts` in chunks of CHUNK on up to `threads` threads, joined in order: each
    thread turns its chunk into arrays while the others are in Rust (which frees the GIL)."""
    chunks = [texts[i:i + CHUNK] for i in range(0, len(texts), CHUNK)] or [[]]
    threads = min(threads or usable_cores(), len(chunks))
    if threads <= 1:
        parts = [_flat(fast, chunk, names) for chunk in chunks]
    else:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            parts = list(pool.map(lambda chunk: _flat(fast, chunk, names), chunks))
    if len(parts) == 1:
        return parts[0]
    return (np.concatenate([p[0] for p in parts]),
            {name: np.concatenate([p[1][name] for p in parts]) for name in names})


def tokenize(tokenizer: Any, texts: Sequence[str], max_length: int | None,
             names: Sequence[str] = ("input_ids",), threads: int | None = None
             ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Token ids of `texts` as flat arrays, with special tokens, truncated to `max_length`.

    Exactly what `tokenizer(texts, truncation=True, max_length=max_length)` returns, faster: a
    fast tokenizer's backend runs on `threads` threads (default: every usable core) without
    computing offsets; other tokenizers take their own path.

    Args:
        tokenizer: a Hugging Face tokenizer.
        texts: the texts.
        max_length: most tokens per text, special tokens included; None: no truncation.
        names: which columns to return (input_ids, token_type_ids, attention_mask); a name the
            tokenizer does not produce is left out.
        threads: threads for a fast tokenizer (default: every usable core).

    Returns:
        (lengths, columns): the token count of each text (int64) and, per name, one flat int64
        array of every text's values end to end (text i at `lengths[:i].sum()`).
    """
    texts = list(texts)
    fast = _fast(tokenizer, max_length)
    if fast is None:
        encoded = _call(tokenizer, texts, max_length)
        present = [n for n in names if n in encoded]
        lengths = np.fromiter((len(x) for x in encoded["input_ids"]), dtype=np.int64,
                              count=len(texts))
        total = int(lengths.sum())
        return lengths, {n: np.fromiter(itertools.chain.from_iterable(encoded[n]),
                                        dtype=np.int64, count=total) for n in present}
    model_inputs = getattr(tokenizer, "model_input_names", None) or list(_FIELDS)
    present = [n for n in names if n in _FIELDS and n in model_inputs]
    return _encode_chunks(fast, texts, present, threads)


def token_lengths(tokenizer: Any, texts: Sequence[str], threads: int | None = None) -> np.ndarray:
    """Untruncated token count of each text, special tokens included (int32).

    Args:
        tokenizer: a Hugging Face tokenizer.
        texts: the texts.
        threads: threads for a fast tokenizer (default: every usable core).

    Returns:
        One count per text.
    """
    return tokenize(tokenizer, texts, None, (), threads)[0].astype(np.int32)


def plan_batches(lengths: np.ndarray, batch_size: int, max_tokens: int | None = None
                 ) -> list[np.ndarray]:
    """Row indices of each batch, shortest texts first.

    Args:
        lengths: token count of each text (after truncation).
        batch_size: most texts in a batch.
        max_tokens: most tokens in a batch after padding (rows x longest row); a text longer
            than that is a batch of its own. None: batches of `batch_size` texts.

    Returns:
        One int64 array of row indices per batch; together they cover every row once.
    """
    order = np.argsort(lengths, kind="stable")
    if max_tokens is None:
        return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    widths = np.asarray(lengths)[order]
    out, start, n = [], 0, len(order)
    while start < n:
        # sorted ascending, so the last row of a batch is its widest: grow while it fits
        stop = min(n, start + batch_size)
        fits = (np.arange(1, stop - start + 1) * widths[start:stop]) <= max_tokens
        take = max(1, int(np.argmin(fits)) if not fits.all() else stop - start)
        out.append(order[start:start + take])
        start += take
    return out


def padded_tokens(lengths: np.ndarray, batches: Sequence[np.ndarray]) -> int:
    """Tokens the model computes on for `batches` (rows x longest row, summed)."""
    return int(sum(len(rows) * int(lengths[rows].max()) for rows in batches if len(rows)))


class SortedBatches:
    """Token ids of `texts`, truncated to `max_length`, served as padded length-sorted batches."""

    def __init__(self, tokenizer, texts: Sequence[str], max_length: int, names: Sequence[str],
                 threads: int | None = None):
        # one flat array per column: padding a batch is then two vectorised numpy operations
        self.lengths, self.columns = tokenize(tokenizer, texts, max_length, names, threads)
        self.max_length = max_length
        self.names = [n for n in names if n in self.columns]
        self.starts = np.zeros(len(self.lengths), dtype=np.int64)
        np.cumsum(self.lengths[:-1], out=self.starts[1:])
        self.pad_id = int(tokenizer.pad_token_id or 0)
        self.left = getattr(tokenizer, "padding_side", "right") == "left"

    def full_lengths(self, tokenizer: Any, texts: Sequence[str]) -> np.ndarray:
        """Untruncated token counts of the texts (int32, `token_lengths`): their lengths here,
        counted again only where a text reached `max_length` (below it nothing was cut).

        Args:
            tokenizer: the tokenizer these tokens came from.
            texts: the same texts, in the same order.

        Returns:
            One count per text.
        """
        out = self.lengths.astype(np.int32)
        if self.max_length:
            at_limit = np.flatnonzero(self.lengths >= self.max_length)
            if len(at_limit):
                out[at_limit] = token_lengths(tokenizer, [texts[i] for i in at_limit])
        return out

    def batches(self, batch_size: int, max_tokens: int | None = None) -> list[np.ndarray]:
        """Row indices of each batch, shortest texts first (see `plan_batches`)."""
        return plan_batches(self.lengths, batch_size, max_tokens)

    def features(self, rows: np.ndarray, pad_to: int = 1) -> dict[str, np.ndarray]:
        """int64 arrays (rows x longest row), padded like the tokenizer would pad them.

        Args:
            rows: which texts, in batch order.
            pad_to: the width is rounded up to a multiple of this (the tokenizer's
                `pad_to_multiple_of`), but not past `max_length`: tensor cores want multiples
                of 8, and a GPU then sees fewer distinct shapes.

        Returns:
            One (len(rows), width) int64 array per column name.
        """
        lengths = self.lengths[rows]
        width = int(lengths.max())
        if pad_to > 1:  # never past max_length: the model may have no positions there
            width = max(width, min(-(-width // pad_to) * pad_to, self.max_length or 0))
        positions = np.arange(width)
        if self.left:
            shift = (width - lengths)[:, None]
            valid = positions >= shift
            source = self.starts[rows][:, None] + positions - shift
        else:
            valid = positions < lengths[:, None]
            source = self.starts[rows][:, None] + positions
        picked = source[valid]
        out = {}
        for name in self.names:
            fill = self.pad_id if name == "input_ids" else 0
            array = np.full((len(rows), width), fill, dtype=np.int64)
            array[valid] = self.columns[name][picked]
            out[name] = array
        return out


# Every column an encoder may feed its model: a tokenising worker makes them all (the two
# besides the ids cost next to nothing), so any backend's model runs on them.
MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class Pretokenized(NamedTuple):
    """A part's texts tokenised for a model: `SortedBatches` and each text's untruncated token
    count (what `encode_counted` returns beside the embeddings)."""

    tokens: SortedBatches
    counts: np.ndarray

    def __len__(self) -> int:
        return len(self.counts)


class Tokenizing:
    """What tokenising apart from the model needs of an encoder (picklable, so a CPU worker
    tokenises while the model runs elsewhere): its tokenizer, maximum length and input names.
    Calling it is the encoder's own tokenisation (`SortedBatches`, `full_lengths`).

    Args:
        tokenizer: The encoder's Hugging Face tokenizer.
        max_length: The model's maximum tokens per text.
        names: The columns to make (default: every model input, `MODEL_INPUTS`).
    """

    def __init__(self, tokenizer: Any, max_length: int,
                 names: Sequence[str] = MODEL_INPUTS) -> None:
        self.tokenizer, self.max_length, self.names = tokenizer, int(max_length), tuple(names)

    def __call__(self, texts: Sequence[str], threads: int | None = None) -> Pretokenized:
        """Tokenise `texts`.

        Args:
            texts: The texts, in order.
            threads: Threads for a fast tokenizer (default: every usable core).

        Returns:
            Their `Pretokenized` tokens and counts.
        """
        texts = list(texts)
        tokens = SortedBatches(self.tokenizer, texts, self.max_length, self.names, threads)
        return Pretokenized(tokens, tokens.full_lengths(self.tokenizer, texts))
