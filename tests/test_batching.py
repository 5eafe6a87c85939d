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
