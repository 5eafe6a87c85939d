"""SortedBatches pads exactly as the tokenizer would, shortest first, every text once."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from tapt.indexer.encoding.models import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model(None))


def test_batches_match_tokenizer_padding(tokenizer):
    from tapt.indexer.encoding.batching import SortedBatches

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

    from tapt.indexer.encoding.batching import SortedBatches
    from tapt.indexer.encoding.models import resolve_model

    left = AutoTokenizer.from_pretrained(resolve_model(None), padding_side="left")
    texts = ["one", "two words", "a sentence of several more words", "four words in all"]
    tokens = SortedBatches(left, texts, max_length=16, names=("input_ids", "attention_mask"))
    for rows in tokens.batches(3):
        ref = left([texts[j] for j in rows], padding=True, truncation=True, max_length=16,
                   return_tensors="np")
        for name, array in tokens.features(rows).items():
            np.testing.assert_array_equal(array, ref[name])


def test_token_budget_batches_cover_every_row_within_both_limits():
    from tapt.indexer.encoding.batching import padded_tokens, plan_batches

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


HOSTILE = ["", " ", "\t\n", "[SEP] inside [CLS] text [PAD] [MASK]", "word " * 400,
           "Ünïcödé, 中文字符 and emoji 🤖🚀", "control\x00chars\x1b[31m here", "a", "UPPER lower",
           "don't stop pre-training: it's 2020!", "x" * 3000]


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("max_length", [8, 32, None])
def test_fast_tokenize_equals_the_tokenizer_call(tokenizer, monkeypatch, threads, max_length):
    import itertools

    from tapt.indexer.encoding import batching

    monkeypatch.setattr(batching, "CHUNK", 4)  # several chunks, so threads really split them
    texts = HOSTILE + [f"sentence number {i} of the test" for i in range(9)]
    names = ("input_ids", "attention_mask", "token_type_ids")
    assert batching._fast(tokenizer, max_length) is not None  # the fast path is taken
    state = (tokenizer.backend_tokenizer.truncation, tokenizer.backend_tokenizer.padding)
    lengths, columns = batching.tokenize(tokenizer, texts, max_length, names, threads=threads)
    counts = batching.token_lengths(tokenizer, texts, threads=threads)
    state_after = (tokenizer.backend_tokenizer.truncation, tokenizer.backend_tokenizer.padding)
    assert state_after == state  # the caller's tokenizer is not reconfigured
    kwargs = {"truncation": True, "max_length": max_length} if max_length else {}
    ref = tokenizer(texts, add_special_tokens=True, **kwargs)
    assert lengths.tolist() == [len(x) for x in ref["input_ids"]]
    assert set(columns) == set(names)
    for name in names:
        np.testing.assert_array_equal(
            columns[name], np.fromiter(itertools.chain.from_iterable(ref[name]), dtype=np.int64))
    full = tokenizer(texts, add_special_tokens=True)["input_ids"]
    assert counts.dtype == np.int32 and counts.tolist() == [len(x) for x in full]


def test_left_truncation_follows_the_tokenizer():
    from transformers import AutoTokenizer

    from tapt.indexer.encoding.batching import tokenize
    from tapt.indexer.encoding.models import resolve_model

    left = AutoTokenizer.from_pretrained(resolve_model(None), truncation_side="left")
    texts = ["the first words are cut away when the text is too long", "short"]
    lengths, columns = tokenize(left, texts, 6, ("input_ids",))
    ref = left(texts, truncation=True, max_length=6)["input_ids"]
    assert lengths.tolist() == [6, 3]
    assert columns["input_ids"].tolist() == ref[0] + ref[1]


def test_a_tokenizer_without_a_fast_backend_takes_its_own_path(tokenizer):
    from tapt.indexer.encoding.batching import SortedBatches, _fast, token_lengths

    class Plain:  # the calling convention of a slow (Python) Hugging Face tokenizer
        is_fast = False
        pad_token_id = 0
        padding_side = "right"

        def __call__(self, texts, **kwargs):
            return tokenizer(texts, **kwargs)

    texts = ["one two three", "", "a longer text of several words"]
    assert _fast(Plain(), 16) is None
    slow = SortedBatches(Plain(), texts, 16, ("input_ids", "attention_mask"))
    fast = SortedBatches(tokenizer, texts, 16, ("input_ids", "attention_mask"))
    assert slow.lengths.tolist() == fast.lengths.tolist()
    for name in ("input_ids", "attention_mask"):
        np.testing.assert_array_equal(slow.columns[name], fast.columns[name])
    assert token_lengths(Plain(), texts).tolist() == token_lengths(tokenizer, texts).tolist()


def test_a_tokenizer_without_token_type_ids_returns_none(tmp_path):
    from transformers import AutoTokenizer

    from tapt.indexer.encoding.batching import tokenize
    from tapt.indexer.encoding.models import resolve_model

    tok = AutoTokenizer.from_pretrained(resolve_model(None))
    tok.model_input_names = ["input_ids", "attention_mask"]
    texts = ["two texts", "here"]
    _, columns = tokenize(tok, texts, 16, ("input_ids", "attention_mask", "token_type_ids"))
    assert set(columns) == set(tok(texts)) == {"input_ids", "attention_mask"}


def test_pad_to_a_multiple_like_the_tokenizer_but_not_past_max_length(tokenizer):
    from tapt.indexer.encoding.batching import SortedBatches

    texts = ["one", "two words here", "a sentence of several more words than that", "x y"]
    tokens = SortedBatches(tokenizer, texts, max_length=13,
                           names=("input_ids", "attention_mask", "token_type_ids"))
    widths = []
    for rows in tokens.batches(2):
        got = tokens.features(rows, pad_to=8)
        longest = int(tokens.lengths[rows].max())
        width = max(longest, min(-(-longest // 8) * 8, 13))
        ref = tokenizer([texts[j] for j in rows], padding="max_length", truncation=True,
                        max_length=width, return_tensors="np")
        for name, array in got.items():
            np.testing.assert_array_equal(array, ref[name])
        widths.append(array.shape[1])
    assert widths == [8, 13]  # 4 -> 8; the truncated 13 is not padded to 16


def test_a_tokenizer_whose_call_differs_from_its_backend_takes_its_own_path():
    """A tokenizer that rewrites text in Python before its backend sees it: the probes catch
    it, and its own call tokenises (ids as the call gives them, not the backend's)."""
    import itertools

    from transformers import AutoTokenizer

    from tapt.indexer.encoding.batching import _fast, tokenize
    from tapt.indexer.encoding.models import resolve_model

    base = type(AutoTokenizer.from_pretrained(resolve_model(None)))

    class Rewriting(base):
        def __call__(self, text, *args, **kwargs):
            return super().__call__([t.replace("o", "0") for t in text], *args, **kwargs)

    tok = Rewriting.from_pretrained(resolve_model(None))
    assert _fast(tok, 16) is None and _fast(tok, None) is None
    texts = ["good morning to you", "no", "plain text"]
    lengths, columns = tokenize(tok, texts, 16, ("input_ids",))
    ref = tok(texts, truncation=True, max_length=16)["input_ids"]
    assert columns["input_ids"].tolist() == list(itertools.chain.from_iterable(ref))
    assert lengths.tolist() == [len(x) for x in ref]


def _trained_tokenizer(kind: str):
    """A small byte-level BPE (RoBERTa-like) or unigram (SentencePiece-like) tokenizer, trained
    here on a few sentences (deterministic), as a Hugging Face fast tokenizer."""
    from tokenizers import ByteLevelBPETokenizer, SentencePieceUnigramTokenizer
    from tokenizers.processors import RobertaProcessing, TemplateProcessing
    from transformers import PreTrainedTokenizerFast

    corpus = ["the quick brown fox jumps over the lazy dog", "Ünïcödé àccents and 中文",
              "emoji 🤖 ok", "don't stop pre-training"] * 20
    if kind == "bpe":
        trained = ByteLevelBPETokenizer(add_prefix_space=True)
        trained.train_from_iterator(corpus, vocab_size=300,
                                    special_tokens=["<s>", "<pad>", "</s>", "<unk>"])
        trained.post_processor = RobertaProcessing(("</s>", 2), ("<s>", 0))
        specials = {"bos_token": "<s>"}
    else:
        trained = SentencePieceUnigramTokenizer()
        trained.train_from_iterator(corpus, vocab_size=120, unk_token="<unk>",
                                    special_tokens=["<pad>", "</s>", "<unk>"])
        trained.post_processor = TemplateProcessing(single="$A </s>",
                                                    special_tokens=[("</s>", 1)])
        specials = {}
    return PreTrainedTokenizerFast(tokenizer_object=trained._tokenizer, eos_token="</s>",
                                   pad_token="<pad>", unk_token="<unk>",
                                   model_input_names=["input_ids", "attention_mask"], **specials)


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
@pytest.mark.parametrize("max_length", [8, None])
def test_other_tokenizer_families_take_the_fast_path_with_equal_ids(kind, max_length):
    import itertools

    from tapt.indexer.encoding.batching import _fast, token_lengths, tokenize

    tok = _trained_tokenizer(kind)
    assert _fast(tok, max_length) is not None
    lengths, columns = tokenize(tok, HOSTILE, max_length,
                                ("input_ids", "attention_mask", "token_type_ids"))
    kwargs = {"truncation": True, "max_length": max_length} if max_length else {}
    ref = tok(HOSTILE, **kwargs)
    assert set(columns) == {"input_ids", "attention_mask"}      # no token_type_ids here
    for name in columns:
        assert columns[name].tolist() == list(itertools.chain.from_iterable(ref[name]))
    assert lengths.tolist() == [len(x) for x in ref["input_ids"]]
    full = tok(HOSTILE)["input_ids"]
    assert token_lengths(tok, HOSTILE).tolist() == [len(x) for x in full]


def test_type_ids_a_template_sets_are_read_not_assumed(tmp_path):
    """Type ids are derived (all 0) only where the probes showed them all 0: a template that
    gives its special tokens type id 1 keeps them."""
    import itertools

    from tokenizers import Tokenizer, processors
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    from tapt.indexer.encoding import batching
    from tapt.indexer.encoding.models import resolve_model

    base = AutoTokenizer.from_pretrained(resolve_model(None))
    backend = Tokenizer.from_str(base.backend_tokenizer.to_str())
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS]:1 $A:0 [SEP]:1", pair="[CLS]:1 $A:0 [SEP]:1 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", base.cls_token_id), ("[SEP]", base.sep_token_id)])
    odd = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="[PAD]")
    odd.model_input_names = ["input_ids", "token_type_ids", "attention_mask"]
    assert not batching._fast(odd, 16).zero_types and batching._fast(base, 16).zero_types
    texts = ["one two three", "", "a longer text of several words"]
    names = ("input_ids", "attention_mask", "token_type_ids")
    _, columns = batching.tokenize(odd, texts, 16, names)
    ref = odd(texts, truncation=True, max_length=16)
    for name in names:
        np.testing.assert_array_equal(
            columns[name], np.fromiter(itertools.chain.from_iterable(ref[name]), dtype=np.int64))
    assert columns["token_type_ids"].tolist().count(1) == 2 * len(texts)
