"""The demo's path at full sample size with the real model (slow: run with `make test-slow`)."""

import pytest

from conftest import SAMPLE


@pytest.mark.slow
def test_bundled_sample_selection_quality(tmp_path):
    import tapt
    from tapt.indexer.building.pipeline import BuildConfig, build_index
    from tapt.indexer.encoding.encoder import SentenceTransformerEncoder
    from tapt.retriever.evaluation.evaluate import evaluate_selections
    from tapt.retriever.evaluation.oracle import sentence_labels

    encoder = SentenceTransformerEncoder(None, device="cpu")
    build_index([SAMPLE / "pool.jsonl.gz"], tmp_path / "idx", encoder,
                BuildConfig(split=False, progress=False))
    index = tapt.Index.open(tmp_path / "idx")
    n_medical = int((sentence_labels(index, "domain") == "medical").sum())
    seeds = SAMPLE / "seeds" / "medical.jsonl.gz"
    floors = {"centroid": 0.8, "knn": 0.7, "iforest": 0.5, "random": 0.0}
    for method, floor in floors.items():
        out = tmp_path / f"{method}.jsonl"
        index.select(method, None if method == "random" else seeds, f"{n_medical}sent",
                     out=out)
        row = evaluate_selections([str(out)], str(tmp_path / "idx"), "domain", "medical")[0]
        assert row["precision"] >= floor, row
        if method == "random":
            assert row["precision"] < 0.3, row
