"""SortedBatches pads exactly as the tokenizer would, shortest first, every text once."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from tapt.indexer.models import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model(None))


def test_batches_match_tokenizer_padding(tokenizer):
    from tapt.indexer.batching import SortedBatches

    texts = ["a much longer sentence with quite a few more words in it", "short", "",
             "medium length text here", "word " * 400]
    tokens = SortedBatches(tokenizer, texts, max_length=32,
                           names=("input_ids", "attention_mask", "token_type_ids"))
    batches = tokens.batches(2)
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(texts)))
    lengths = [int(tokens.lengths[b].max()) for b in batches]
    assert lengths == sorted(lengths) and max(lengths) == 32  # truncated like the tokenizer
    for rows in batches:
        got = tokens.features(rows)
        ref = tokenizer([texts[j] for j in rows], padding=True, truncation=True, max_length=32,
                        return_tensors="np")
        assert set(got) == {"input_ids", "attention_mask", "token_type_ids"}
        for name, array in got.items():
            assert array.dtype == np.int64
            np.testing.assert_array_equal(array, ref[name])


def test_left_padding_matches_the_tokenizer(tokenizer):
    from transformers import AutoTokenizer

    from tapt.indexer.batching import SortedBatches
    from tapt.indexer.models import resolve_model

    left = AutoTokenizer.from_pretrained(resolve_model(None), padding_side="left")
    texts = ["one", "two words", "a sentence of several more words", "four words in all"]
    tokens = SortedBatches(left, texts, max_length=16, names=("input_ids", "attention_mask"))
    for rows in tokens.batches(3):
        ref = left([texts[j] for j in rows], padding=True, truncation=True, max_length=16,
                   return_tensors="np")
        for name, array in tokens.features(rows).items():
            np.testing.assert_array_equal(array, ref[name])


def test_token_budget_batches_cover_every_row_within_both_limits():
    from tapt.indexer.batching import padded_tokens, plan_batches

    lengths = np.random.default_rng(0).integers(3, 120, size=500)
    lengths[7] = 400  # longer than the budget: a batch of its own
    batches = plan_batches(lengths, batch_size=64, max_tokens=256)
    assert sorted(np.concatenate(batches).tolist()) == list(range(500))
    for rows in batches:
        width = int(lengths[rows].max())
        assert len(rows) <= 64
        assert len(rows) * width <= 256 or len(rows) == 1
    assert [len(b) for b in batches if 7 in b] == [1]
    widths = [int(lengths[b].max()) for b in batches]
    assert widths == sorted(widths)  # shortest first
    plain = plan_batches(lengths, batch_size=64)
    assert [len(b) for b in plain] == [64] * 7 + [52]
    # the budget cuts where lengths change, so it pads less than fixed-size batches
    assert padded_tokens(lengths, batches) < padded_tokens(lengths, plain)
    assert padded_tokens(lengths, [np.arange(500)]) == 500 * 400
