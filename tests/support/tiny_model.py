"""A tiny randomly initialised BERT masked LM with a word-level vocabulary, for tests and smoke runs
(no download): `write_tiny_bert(dir, texts)` saves a model + tokenizer loadable by `tapt train`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def tiny_vocab(texts: Iterable[str], limit: int = 400) -> list[str]:
    """Special tokens, then the most frequent lower-cased words and punctuation of `texts`."""
    counts: dict[str, int] = {}
    for text in texts:
        for token in re.findall(r"\w+|[^\w\s]", text.lower()):
            counts[token] = counts.get(token, 0) + 1
    words = sorted(counts, key=lambda w: (-counts[w], w))[: max(0, limit - len(SPECIAL_TOKENS))]
    return SPECIAL_TOKENS + sorted(words)


def write_tiny_bert(
    path: str | Path, texts: Iterable[str], *, hidden_size: int = 32, layers: int = 2,
    max_positions: int = 64, seed: int = 0, vocab_limit: int = 400,
) -> Path:
    """Write `vocab.txt`, a BertTokenizerFast and a random BertForMaskedLM into `path`."""
    import torch
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    vocab = tiny_vocab(texts, vocab_limit)
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tokenizer = BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=True)
    tokenizer.model_max_length = max_positions
    tokenizer.save_pretrained(path)
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(vocab), hidden_size=hidden_size, num_hidden_layers=layers,
        num_attention_heads=2, intermediate_size=2 * hidden_size,
        max_position_embeddings=max_positions,
    )
    BertForMaskedLM(config).save_pretrained(path)
    return path
