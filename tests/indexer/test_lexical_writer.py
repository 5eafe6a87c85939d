"""The prepare stage's lexical writer streams: block by block to scratch files, the same arrays
as one pass over the whole stream."""

from __future__ import annotations

import numpy as np
import pytest

from tapt.indexer.reading.lexical import LexicalWriter, pairs_to_arrays, words

NAMES = ("vocab", "bigrams", "lexical", "lexical_offsets")


def _sentences(seed: int, n: int) -> list[str]:
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(300)] + ["The", "the", ".", ",", "é"]
    return [" ".join(rng.choice(vocab, size=int(rng.integers(0, 12)))) for _ in range(n)]


@pytest.mark.parametrize("block", [7, 64, 1 << 22])
def test_streamed_arrays_equal_the_whole_stream(tmp_path, monkeypatch, block):
    texts = _sentences(3, 2_000)
    monkeypatch.setattr(LexicalWriter, "BLOCK", block)
    monkeypatch.setenv("TAPT_SCRATCH_DIR", str(tmp_path))
    writer = LexicalWriter()
    for text in texts:
        writer.add(text)
    paths = {name: tmp_path / f"{name}.npy" for name in NAMES}
    writer.write(paths)
    ids: dict[str, int] = {}
    stream, lengths = [], []
    for text in texts:
        found = [ids.setdefault(w, len(ids) + 2) for w in words(text)]
        stream += [0, *found, 1]
        lengths.append(len(found) + 1)
    whole = pairs_to_arrays(np.array(stream, dtype=np.int64), np.array(lengths, dtype=np.int64),
                            writer._vocab())
    for name in NAMES:
        got = np.load(paths[name])
        assert got.dtype == whole[name].dtype and np.array_equal(got, whole[name]), name
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{n}.npy" for n in NAMES)


def test_no_sentence_writes_empty_arrays(tmp_path):
    paths = {name: tmp_path / f"{name}.npy" for name in NAMES}
    LexicalWriter().write(paths)
    assert np.load(paths["lexical_offsets"]).tolist() == [0]
    assert np.load(paths["bigrams"]).shape == (0, 2)
    assert np.load(paths["lexical"]).dtype == np.int32
