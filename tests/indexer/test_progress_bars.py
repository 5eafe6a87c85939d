"""Progress that moves: the embed stage's bar advances by a few hundred rows, not by a part of
4,096; a selection method's scoring shows its fits and passes over the rows as they happen; the
preparation of a training run (reading selections, tokenising) has bars of its own."""

from __future__ import annotations

import numpy as np
import pytest

import tapt
from conftest import HashingEncoder, write_labelled_corpus
from tapt.indexer.encoding.encoder import REPORT_ROWS, encode_counted


def test_encode_counted_reports_rows_and_keeps_the_order():
    rng = np.random.default_rng(0)
    texts = [" ".join("word" for _ in range(int(n))) + f" {i}."
             for i, n in enumerate(rng.integers(1, 40, size=1000))]
    encoder = HashingEncoder()
    reports: list[int] = []
    got, counts = encode_counted(encoder, texts, batch_size=64, on_rows=reports.append)
    want, want_counts = encode_counted(encoder, texts, batch_size=64)
    assert sum(reports) == 1000 and max(reports) <= REPORT_ROWS and len(reports) >= 7
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert counts.tolist() == want_counts.tolist()


def test_encode_counted_on_cuda_embeds_a_part_in_one_call():
    class OnGpu(HashingEncoder):
        device = "cuda"
        calls = 0

        def encode(self, texts, batch_size=64):
            OnGpu.calls += 1
            return super().encode(texts, batch_size=batch_size)

    texts = [f"sentence number {i} of the part." for i in range(3000)]
    reports: list[int] = []
    got, counts = encode_counted(OnGpu(), texts, batch_size=1024, on_rows=reports.append)
    assert reports == [3000] and OnGpu.calls == 1
    want, want_counts = encode_counted(HashingEncoder(), texts, batch_size=1024)
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert counts.tolist() == want_counts.tolist()


class _Bars:
    """Stands in for tqdm: records every bar's updates by its description."""

    def __init__(self) -> None:
        self.updates: dict[str, list[int]] = {}
        self.shown: list[str] = []

    def __call__(self, *args, desc=None, **kwargs):
        updates = self.updates.setdefault(desc, [])
        shown = self.shown

        class Bar:
            total = kwargs.get("total") or 0

            def update(self, n=1):
                updates.append(n)

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

            def close(self):
                pass

            def set_postfix_str(self, text, **k):
                shown.append(text)

        return Bar()


def test_the_embed_bar_moves_by_rows_not_by_parts(tmp_path, monkeypatch):
    from tapt.indexer.building.executors import local as executors
    from tapt.indexer.building.pipeline import BuildConfig, build_index

    bars = _Bars()
    monkeypatch.setattr(executors, "tqdm", bars)
    write_labelled_corpus(tmp_path / "pool.jsonl", docs_per_topic=12)
    build_index([tmp_path / "pool.jsonl"], tmp_path / "idx", HashingEncoder(),
                BuildConfig(split=False, progress=True, part_size=4096, batch_size=16))
    embed = [n for n in bars.updates["embed"] if n]
    assert len(embed) >= 3 and max(embed) <= REPORT_ROWS, embed


def test_fused_scoring_reports_its_steps(fake_index):
    from tapt.util import progress

    steps: list[str] = []
    token = progress._STEP.set(steps.append)
    try:
        tapt.Index.open(fake_index).select(
            "fused", task=["Patient fever therapy dose.", "Kidney biopsy lesion.",
                           "Dose of the therapy."], budget="5")
    finally:
        progress._STEP.reset(token)
    for what in ("fit the classifier", "score rows 0-", "fit the task's and the corpus's word "
                 "models", "score the words of rows", "fit the wording classifier"):
        assert any(s.startswith(what) for s in steps), (what, steps)


def test_steps_move_a_bar_only_while_one_is_shown(capsys):
    from tapt.util.progress import report_step, showing_steps

    report_step("nobody sees this")
    with showing_steps("score x"):
        report_step("first")
        report_step("second")
    with showing_steps("score y", enabled=False):
        report_step("hidden")
    err = capsys.readouterr().err
    assert "score x: 0 steps" in err and "score y" not in err


def test_the_preparation_of_training_shows_bars(fake_index, tmp_path, capsys):
    from tapt.trainer.data import document_examples, segment_examples
    from tapt.trainer.inputs import load_selections
    from tiny_model import write_tiny_bert

    sel = tapt.Index.open(fake_index).select(
        "centroid", task=["Patient fever therapy dose."], budget="20",
        out=tmp_path / "s.jsonl")
    segments, _ = load_selections([str(sel.path)], progress=True)
    model = write_tiny_bert(tmp_path / "tiny", [s.text for s in segments], hidden_size=32,
                            layers=1, max_positions=64)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    examples = segment_examples(segments, tokenizer, 32, progress=True)
    document_examples(["A task document. It has two sentences."], tokenizer, 32, "task",
                      progress=True)
    err = capsys.readouterr().err
    assert "read selections" in err and "tokenise selections" in err and "tokenise task" in err
    assert examples and examples == segment_examples(segments, tokenizer, 32)


@pytest.mark.parametrize("chunk", [1, 3])
def test_tokenising_in_chunks_gives_the_same_examples(fake_index, tmp_path, monkeypatch, chunk):
    from tapt.trainer import data
    from tiny_model import write_tiny_bert

    texts = [f"sentence number {i} about the cat ." for i in range(10)]
    model = write_tiny_bert(tmp_path / "tiny", texts, hidden_size=32, layers=1,
                            max_positions=64)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    units = [texts[:4], texts[4:5], texts[5:]]
    whole = data.pack_sentences(units, tokenizer, 16)
    monkeypatch.setattr(data, "TOKENIZE_CHUNK", chunk)
    assert data.pack_sentences(units, tokenizer, 16, progress=True) == whole


def test_shards_scored_side_by_side_still_report_their_steps(monkeypatch):
    import numpy as np

    from tapt.indexer.reading import lexical
    from tapt.util import progress

    monkeypatch.setattr(lexical, "usable_cores", lambda: 2)
    lexicon = lexical.Lexicon(["a", "b", "c"], np.array([0, 2, 5, 6]), None)
    steps: list[str] = []
    token = progress._STEP.set(steps.append)
    try:
        scores = lexicon.map_shards(lambda shard: np.full(
            {"a": 2, "b": 3, "c": 1}[shard], ord(shard), np.float32))
    finally:
        progress._STEP.reset(token)
    assert scores.tolist() == [97, 97, 98, 98, 98, 99]
    assert sorted(steps) == ["score the words of rows 0-2", "score the words of rows 2-5",
                             "score the words of rows 5-6"]
