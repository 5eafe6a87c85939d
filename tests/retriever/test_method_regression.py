"""Every method's selection on the fake index, row for row, against a recording.

The recording (tests/data/method_selections.json) was made before the methods moved into the
registry; a refactoring must reproduce it: the same segment ids and info, float32 scores and
weights to within BLAS rounding (which differs between CPUs).
After a deliberate change of a method's numerics, re-record with
`python tests/retriever/test_method_regression.py` and say why in the commit.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

RECORDING = Path(__file__).parents[1] / "data" / "method_selections.json"

# (case, method, budget, segment size, seed, method parameters)
CASES = [
    ("centroid-frac", "centroid", "0.3", None, 0, {}),
    ("centroid-sent-s1", "centroid", "50sent", 1, 0, {}),
    ("centroid-tok", "centroid", "400tok", None, 0, {}),
    ("centroid-seg", "centroid", "7", None, 0, {}),
    ("knn-union", "knn", None, None, 0, {"k": 10}),
    ("knn-budget", "knn", "0.2", None, 0, {"k": 5}),
    ("knn-s1", "knn", "60sent", 1, 0, {"k": 50}),
    ("iforest-default", "iforest", "0.3", None, 0, {}),
    ("iforest-continuous", "iforest", "1.0", None, 0,
     {"candidates": "all", "weights": "continuous", "C": 4.0, "alpha": 0.0}),
    ("iforest-continuous-2", "iforest", "0.4", None, 7,
     {"weights": "continuous", "C": 2.0, "alpha": 0.5}),
    ("iforest-pca", "iforest", "100sent", 1, 0, {"pca": 4}),
    ("iforest-knn", "iforest", "0.3", None, 0, {"prerank": "knn", "k": 10}),
    ("iforest-density", "iforest", "100sent", 1, 0,
     {"prerank": "density", "detector": "lof", "candidates": "2x"}),
    ("iforest-classifier", "iforest", "100sent", 1, 1,
     {"prerank": "classifier", "candidates": "1.5x", "detector": "knn-dist"}),
    ("iforest-fused", "iforest", "100sent", 1, 0,
     {"prerank": "fused", "candidates": "1.2x", "detector": "knn-dist"}),
    ("iforest-auto", "iforest", "100sent", 1, 0, {"detector": "auto", "candidates": "3x"}),
    ("iforest-count", "iforest", "10", None, 3, {"candidates": "25", "detector": "pca-recon"}),
    ("random", "random", "0.5", None, 3, {}),
    ("random-s1", "random", "40sent", 1, 0, {}),
    ("distance", "distance", "100sent", None, 1, {}),
    ("distance-s1", "distance", "0.3", 1, 0, {}),
    ("density-5", "density", "100sent", 1, 0, {"m": 5}),
    ("density-1", "density", "0.25", None, 0, {"m": 1}),
    ("classifier-1", "classifier", "100sent", 1, 0, {"rounds": 1}),
    ("classifier-0-nobudget", "classifier", None, 1, 0, {"rounds": 0}),
    ("classifier-2-frac", "classifier", "0.3", None, 2, {"rounds": 2}),
    ("classifier-nobudget", "classifier", None, None, 0, {}),
    ("moore-lewis", "moore-lewis", "100sent", 1, 0, {}),
    ("moore-lewis-seed", "moore-lewis", "0.3", None, 2, {}),
    ("fused-1", "fused", "100sent", 1, 0, {"rounds": 1, "wording": "lm"}),
    ("fused-frac", "fused", "0.2", None, 0, {"wording": "lm"}),
    ("fused-wording", "fused", "100sent", 1, 0, {}),
    ("fused-wording-tok", "fused", "400tok", None, 1, {}),
    ("auto", "auto", "100sent", 1, 0, {}),
    ("auto-m5", "auto", "0.3", None, 1, {"m": 5, "rounds": 1}),
    ("auto-nobudget", "auto", None, 1, 0, {}),
]


def selections(index_path: Path, task_path: Path) -> dict[str, dict]:
    """Every case's ranking: segments, float32 scores and weights, info (timings left out)."""
    from conftest import HashingEncoder
    from tapt.indexer.index import Index
    from tapt.retriever.selections.make import SelectConfig, rank

    texts = task_path.read_text().splitlines()
    task = HashingEncoder().encode(texts)
    index = Index(index_path)
    out = {}
    for name, method, budget, size, seed, params in CASES:
        try:
            # recorded at sentence context (the default, auto, pools this corpus's documents;
            # document context has its own tests in test_document_pooling.py)
            config = SelectConfig(method=method, budget=budget, segment_size=size, seed=seed,
                                  **{"context": "sentence", **params})
            ranking, _ = rank(index, config, task, texts)
        except Exception as exc:  # noqa: BLE001 - the recording keeps which error a case raised
            out[name] = {"error": type(exc).__name__}
            continue
        info = {k: v for k, v in ranking.info.items() if not k.endswith("_seconds")}
        out[name] = {"segments": ranking.segments.tolist(),
                     "scores": [float(x) for x in np.asarray(ranking.scores, np.float32)],
                     "weights": [float(x) for x in np.asarray(ranking.weights, np.float32)],
                     "info": json.loads(json.dumps(info, default=str))}
    return out


@pytest.fixture(scope="module")
def recorded() -> dict[str, dict]:
    return json.loads(RECORDING.read_text())


@pytest.fixture(scope="module")
def current(fake_index, medical_task) -> dict[str, dict]:
    return selections(fake_index, medical_task)


@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_selection_is_row_for_row_the_recorded_one(recorded, current, case):
    want, got = recorded[case], current[case]
    if "error" in want:
        assert got.get("error") == want["error"], got
        return
    assert got["segments"] == want["segments"]
    # Scores to within a few float32 ulps, not bit for bit: BLAS picks its kernels by CPU
    # (AVX2 and AVX-512 sum in different orders), and a score is a sum of products. The largest
    # drift seen between those two machines: 1.2e-4 (iforest in a PCA projection), else 5e-7.
    np.testing.assert_allclose(np.float32(got["scores"]), np.float32(want["scores"]),
                               rtol=1e-4, atol=2e-4)
    np.testing.assert_allclose(np.float32(got["weights"]), np.float32(want["weights"]),
                               rtol=1e-4, atol=1e-5)
    assert got["info"] == want["info"]


@pytest.fixture(scope="module")
def spilled(fake_index, medical_task, tmp_path_factory) -> dict[str, dict]:
    """Every case again with every per-row and per-segment array on a scratch file."""
    scratch = tmp_path_factory.mktemp("scratch")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TAPT_SPILL_BYTES", "0")
        mp.setenv("TAPT_SCRATCH_DIR", str(scratch))
        from tapt.util import spill

        before = spill.spilled_total()
        out = selections(fake_index, medical_task)
        assert spill.spilled_total() > before          # the arrays did go to scratch files
    assert list(scratch.iterdir()) == []                # and nothing is left there
    return out


def test_selections_with_arrays_on_scratch_files_are_the_same(current, spilled):
    assert spilled == current


def _record(base: Path) -> None:
    sys.path.insert(0, str(Path(__file__).parents[1]))
    from conftest import HashingEncoder, write_labelled_corpus, write_task
    from tapt.indexer.building.pipeline import BuildConfig, build_index

    corpus, index, task = base / "pool.jsonl", base / "index", base / "medical.txt"
    write_labelled_corpus(corpus)
    build_index([corpus], index, HashingEncoder(),
                BuildConfig(segment_size=4, split=False, progress=False, part_size=64))
    write_task(task, "medical")
    RECORDING.write_text(json.dumps(selections(index, task), indent=0) + "\n")


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        _record(Path(tmp))
    print(f"recorded {len(CASES)} cases -> {RECORDING}")
