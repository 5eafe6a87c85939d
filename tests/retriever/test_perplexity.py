"""The `perplexity` method (issue 30): a masked LM adapted to the task rescores a pre-ranking's
candidates by pseudo-log-likelihood per token, with a bounded number of masks per sentence."""

import json
import random

import numpy as np
import pytest

from conftest import make_sentence
from tapt.errors import InputError
from tapt.indexer.index import Index
from tapt.modeling.mlm import load_mlm, masked_token_losses
from tapt.retriever.evaluation.oracle import sentence_labels
from tapt.retriever.learned import task_lm


def _sentences(topic, n, seed):
    rng = random.Random(seed)
    return [make_sentence(rng, topic) for _ in range(n)]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory, labelled_corpus):
    from tiny_model import write_tiny_bert

    texts = [r["text"] for r in labelled_corpus[1]]
    return str(write_tiny_bert(tmp_path_factory.mktemp("tiny-lm") / "bert", texts))


def test_mask_positions_are_bounded_and_spread():
    assert task_lm.mask_positions(3, 8).tolist() == [0, 1, 2]
    got = task_lm.mask_positions(40, 8)
    assert got.tolist() == [2, 7, 12, 17, 22, 27, 32, 37]      # one per fifth of a stratum
    assert len(task_lm.mask_positions(1000, 8)) == 8
    assert task_lm.mask_positions(0, 8).tolist() == []


def test_masked_token_losses_match_the_full_forward(tiny_lm):
    """The head-only path (hidden states of the masked positions through BERT's `cls`) gives
    the losses of the model's own full forward pass, in the order of the copies."""
    import torch

    torch.manual_seed(0)
    model, tokenizer, _ = load_mlm(tiny_lm)
    model.eval()
    seqs = [tuple(tokenizer(t)["input_ids"]) for t in _sentences("sea", 5, 3)]
    copies = [(s, p) for s in seqs for p in (1, len(s) - 2)]
    got = masked_token_losses(model, tokenizer.mask_token_id, tokenizer.pad_token_id, copies,
                              batch_size=3)
    expected = []
    for seq, pos in copies:
        ids = torch.tensor([seq])
        ids[0, pos] = tokenizer.mask_token_id
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, pos]
        expected.append(-float(torch.log_softmax(logits, -1)[seq[pos]]))
    assert np.allclose(got, expected, atol=1e-5)
    # the adaptation's loss: the model's own loss, through the head at the targets only
    from tapt.modeling.mlm import MaskingCollator, masked_lm_loss
    from tapt.trainer.data import Example

    batch = MaskingCollator(tokenizer)([Example(s) for s in seqs], torch.Generator().manual_seed(1))
    with torch.no_grad():
        own = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                    labels=batch["labels"]).loss
        mine = masked_lm_loss(model, batch["input_ids"], batch["attention_mask"], batch["labels"])
    assert abs(float(own) - float(mine)) < 1e-5


def _run(fake_index, tiny_lm, **kw):
    index = Index(fake_index)
    labels = sentence_labels(index, "domain")
    task = _sentences("legal", 30, 11)
    n = int((labels == "legal").sum())
    prerank = np.random.default_rng(0).normal(0, 1, index.n_sentences)   # no signal at all
    config = task_lm.PerplexityConfig(**{"model": tiny_lm, "candidates": "all",
                                         "adapt_steps": 40, "lr": 2e-3, "batch_size": 8,
                                         "max_length": 24, **kw})
    models = task_lm.fit_models(index, task, config)
    return task_lm.perplexity_scores(index, prerank, n, models, config), labels, n


def test_task_lm_ranks_task_like_candidates_first_and_is_cached(fake_index, tiny_lm, tmp_path,
                                                               monkeypatch):
    monkeypatch.setenv("TAPT_CACHE_DIR", str(tmp_path / "cache"))
    result, labels, n = _run(fake_index, tiny_lm)
    top = labels[np.argsort(-result.scores, kind="stable")[:n]]
    assert (top == "legal").mean() > 0.8                # chance: about a third
    info = result.info
    assert not info["task_model"]["cached"] and info["candidate_rows"] == len(labels)
    assert 0 < info["task_model"]["scored_positions"] <= 8 * len(labels)
    again, *_ = _run(fake_index, tiny_lm)                # the adapted model comes from the cache
    assert again.info["task_model"]["cached"] and np.array_equal(again.scores, result.scores)
    assert len(list((tmp_path / "cache" / "perplexity").iterdir())) == 1
    diff, *_ = _run(fake_index, tiny_lm, difference=True)      # a general model beside it
    assert "general_model" in diff.info and diff.info["general_model"]["texts"] == 30
    top = labels[np.argsort(-diff.scores, kind="stable")[:n]]
    assert (top == "legal").mean() > 0.6


def test_perplexity_through_index_select(fake_index, encoder, tiny_lm, monkeypatch):
    import tapt

    monkeypatch.setenv("TAPT_CACHE_DIR", "off")
    ix = tapt.Index.open(fake_index)
    labels = sentence_labels(Index(fake_index), "domain")
    n = int((labels == "medical").sum())
    texts = _sentences("medical", 30, 4)

    def select(**kw):
        return ix.select("perplexity", task=texts, budget=f"{n}sent", segment_size=1,
                         seed=2, context="sentence", lm_model=tiny_lm,
                         adapt_steps=10, **kw)

    first, second = select(), select()
    assert len(first) == n and first.rows.tolist() == second.rows.tolist()   # seeded
    info = first.info["perplexity"]
    assert first.info["prerank"] == "fused" and info["candidate_rows"] == min(3 * n, len(labels))
    assert info["total_seconds"] >= 0 and info["task_model"]["adapt_seconds"] >= 0
    json.dumps(first.info)                               # what the selection's manifest records
    assert select(prerank="centroid", candidates="50").info["perplexity"]["candidate_rows"] == 50


def test_perplexity_refuses_bad_parameters(fake_index, encoder):
    import tapt
    from tapt.retriever.selections.make import SelectConfig

    for params in ({"adapt_steps": -1}, {"max_masks": 0}, {"candidates": "z"},
                   {"lm_device": "tpu"}, {"prerank": "perplexity"}, {"lm_lr": 0.0},
                   {"prerank": "nope"}, {"difference": "yes"}):
        with pytest.raises(InputError) as err:
            SelectConfig("perplexity", "100sent", **params)
        assert err.value.param == next(iter(params))
    with pytest.raises(InputError, match="budget"):
        SelectConfig("perplexity")
    ix = tapt.Index.open(fake_index)
    texts = _sentences("medical", 10, 4)
    # the index's own model (the hashing test encoder) is no masked LM: refused, naming lm_model
    with pytest.raises(InputError) as err:
        ix.select("perplexity", task=texts, budget="20sent", prerank="centroid")
    assert err.value.param == "lm_model"
    with pytest.raises(InputError, match="text"):
        ix.select("perplexity", task=encoder.encode(texts), budget="20sent")
