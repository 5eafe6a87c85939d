"""Selected segments and task documents -> token-id examples of at most `max_length` tokens.

Following TADPOLE (sec. 3.2), text is never joined across two segments: consecutive sentences of ONE
segment (or one task document) are packed greedily up to `max_length` tokens, and a sentence that is
longer than that on its own becomes its own, truncated, example.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from tapt.errors import InputError
from tapt.indexer.reading.splitter import SentenceSplitter
from tapt.retriever.selections.file_format import SelectedSegment
from tapt.util.training import quiet_transformers


@dataclass(frozen=True)
class Example:
    """One training / evaluation sequence (with special tokens) and its loss weight."""

    input_ids: tuple[int, ...]
    weight: float = 1.0
    source: str = "selection"


def group_sentences(lengths: Sequence[int], capacity: int) -> list[tuple[int, int]]:
    """Greedy packing of consecutive sentences: [start, end) index ranges whose token lengths sum to
    at most `capacity`; a sentence longer than `capacity` forms a range of its own."""
    groups: list[tuple[int, int]] = []
    start, used = 0, 0
    for i, n in enumerate(lengths):
        if i > start and used + n > capacity:
            groups.append((start, i))
            start, used = i, 0
        used += n
    if start < len(lengths):
        groups.append((start, len(lengths)))
    return groups


TOKENIZE_CHUNK = 2048    # texts per tokenizer call: a progress bar moves every chunk


def _tokenized(tokenizer: Any, texts: list[str], bar: Any, **options: Any) -> list[list[int]]:
    """`tokenizer(texts, **options)["input_ids"]` in chunks, moving `bar` by each chunk's texts."""
    out: list[list[int]] = []
    for start in range(0, len(texts), TOKENIZE_CHUNK):
        chunk = texts[start:start + TOKENIZE_CHUNK]
        out += tokenizer(chunk, **options)["input_ids"]
        bar.update(len(chunk))
    return out


def pack_sentences(
    units: Sequence[Sequence[str]], tokenizer: Any, max_length: int, progress: bool = False,
    desc: str = "tokenise",
) -> list[list[tuple[int, ...]]]:
    """For each unit (a segment's sentences), the packed examples' token ids, special tokens added.

    Sentences are counted once to decide the groups; each group's text (sentences joined by a space) is
    then tokenized as a whole, so subword tokenizers that depend on the preceding space (BPE) see
    natural text. Truncation to `max_length` guards the rare case where joining adds tokens.
    `progress` shows a bar (`desc`) of the texts tokenised: sentences, then the packed groups.
    """
    from tqdm.auto import tqdm

    capacity = max_length - tokenizer.num_special_tokens_to_add(pair=False)
    if capacity < 1:
        raise InputError(f"{max_length} leaves no room for text after special tokens",
                         param="max_length")
    flat = [s for unit in units for s in unit if s.strip()]
    bar = tqdm(total=len(flat), desc=desc, unit="text", disable=not progress or not flat,
               dynamic_ncols=True)
    with quiet_transformers():  # counting long sentences is not an error: they get truncated
        counted = _tokenized(tokenizer, flat, bar, add_special_tokens=False)
    lengths = [len(ids) for ids in counted]
    texts: list[str] = []
    owners: list[int] = []
    offset = 0
    for u, unit in enumerate(units):
        sentences = [s for s in unit if s.strip()]
        unit_lengths = lengths[offset : offset + len(sentences)]
        offset += len(sentences)
        for start, end in group_sentences(unit_lengths, capacity):
            texts.append(" ".join(sentences[start:end]))
            owners.append(u)
    out: list[list[tuple[int, ...]]] = [[] for _ in units]
    bar.total += len(texts)
    encoded = _tokenized(tokenizer, texts, bar, truncation=True, max_length=max_length)
    for owner, ids in zip(owners, encoded):
        out[owner].append(tuple(int(i) for i in ids))
    bar.close()
    return out


def segment_examples(
    segments: Sequence[SelectedSegment], tokenizer: Any, max_length: int, progress: bool = False
) -> list[Example]:
    """Examples of selected segments, each carrying its segment's weight (lambda); `progress`
    shows a bar of the texts tokenised."""
    for seg in segments:
        if not (math.isfinite(seg.weight) and seg.weight >= 0):
            raise InputError(
                f"segment {seg.id} has weight {seg.weight}; selection weights must be 0 or more"
            )
    units = [seg.sentences if seg.sentences else [seg.text] for seg in segments]
    packed = pack_sentences(units, tokenizer, max_length, progress, "tokenise selections")
    return [
        Example(ids, float(seg.weight), "selection")
        for seg, examples in zip(segments, packed)
        for ids in examples
    ]


def document_examples(
    documents: Iterable[Sequence[str] | str], tokenizer: Any, max_length: int, source: str = "task",
    progress: bool = False,
) -> list[Example]:
    """Examples of documents (lists of sentences, or strings the corpus splitter splits), weight 1;
    `progress` shows a bar of the texts tokenised."""
    splitter = SentenceSplitter()
    units = [splitter(doc) if isinstance(doc, str) else list(doc) for doc in documents]
    packed = pack_sentences(units, tokenizer, max_length, progress, f"tokenise {source}")
    return [Example(ids, 1.0, source) for examples in packed for ids in examples]
