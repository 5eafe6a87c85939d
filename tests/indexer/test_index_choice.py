"""The FAISS index choice: pure rules on (rows, dims, memory budget), and memory sizes."""

from __future__ import annotations

import pytest

from tapt.errors import InputError
from tapt.indexer.ann.index_choice import (
    MEDIUM_MAX,
    SMALL_MAX,
    choice_from_manifest,
    choose_index,
    hnsw_bytes,
    parse_memory,
    rescore_k,
)

G = 1 << 30


@pytest.mark.parametrize("spec, size", [("8G", 8 * G), ("512M", 512 << 20), ("1.5G", 3 * G // 2),
                                        ("2GiB", 2 * G), ("64k", 64 << 10), ("1000", 1000),
                                        ("4 GB", 4 * G), (4096, 4096)])
def test_parse_memory(spec, size):
    assert parse_memory(spec) == size


@pytest.mark.parametrize("spec", ["8X", "", "G", "-1G", "0", "0M", "1.2.3G", "eight"])
def test_parse_memory_refuses_bad_sizes(spec):
    with pytest.raises(InputError, match="^memory: "):
        parse_memory(spec)


def test_auto_goes_by_size():
    small = choose_index(SMALL_MAX, 384, "8G")
    assert (small.kind, small.factory, small.approximate) == ("flat", "Flat", False)
    medium = choose_index(SMALL_MAX + 1, 384, "8G")
    assert (medium.kind, medium.factory, medium.search_param) == ("hnsw", "HNSW32", "efSearch")
    assert medium.params == {"M": 32, "efConstruction": 40}
    large = choose_index(1_000_000, 384, "8G")
    assert (large.kind, large.factory) == ("ivfpq", "IVF2048,PQ192x4fs")
    assert large.params["nlist"] == 2048 and large.params["m"] == 192
    assert large.search_param == "nprobe" and max(large.search_sweep) <= 2048
    assert 0 < large.train_size < 1_000_000 and large.train_size >= 40 * 2048
    for c in (small, medium, large):
        assert c.estimated_bytes <= 8 * G and "n = " in c.reason and "budget 8.0 GB" in c.reason


def test_memory_moves_the_choice_down_to_more_compact_types():
    assert choose_index(SMALL_MAX, 384, "12M").kind == "ivfpq"   # Flat 154 MB, HNSW8 170 MB
    tight = choose_index(200_000, 384, "64M")
    assert tight.kind == "ivfpq" and tight.estimated_bytes <= 64 << 20
    assert "HNSW does not fit" in tight.reason
    between = hnsw_bytes(MEDIUM_MAX, 384, 16) + 1
    assert hnsw_bytes(MEDIUM_MAX, 384, 32) > between
    assert choose_index(MEDIUM_MAX, 384, between).factory == "HNSW16"
    smaller_m = choose_index(1_000_000, 384, "60M")
    assert smaller_m.params["m"] < 192 and smaller_m.estimated_bytes <= 60 << 20


def test_forced_types_and_too_small_budgets():
    assert choose_index(10, 8, "1G", "hnsw").factory == "HNSW32"
    assert choose_index(200_000, 384, "8G", "flat").kind == "flat"
    opq = choose_index(5_000, 64, "1G", "ivfpq", opq=True)
    assert opq.factory.startswith("OPQ32,IVF") and opq.params["opq"] is True
    with pytest.raises(InputError, match="too small"):
        choose_index(1_000_000, 384, "1G", "flat")
    with pytest.raises(InputError, match="too small"):
        choose_index(1_000_000, 384, "1M")
    with pytest.raises(InputError, match="at least 1,000"):
        choose_index(500, 64, "1G", "ivfpq")
    with pytest.raises(InputError, match="^index: "):
        choose_index(500, 64, "1G", "annoy")


def test_rescoring_fetches_more_candidates_for_approximate_types():
    assert rescore_k(50, "flat", 10_000) == 50
    assert rescore_k(50, "hnsw", 10_000) == 100
    assert rescore_k(50, "ivfpq", 10_000) == 200
    assert rescore_k(50, "ivfpq", 120) == 120
    assert rescore_k(50, "ivfpq", 10_000, factor=16) == 800


def test_old_manifests_and_recorded_choices():
    old = choice_from_manifest({"factory": "Flat", "metric": "inner_product", "ntotal": 5}, 5, 8)
    assert (old.kind, old.factory, old.search_param) == ("flat", "Flat", None)
    chosen = choose_index(100_000, 384, "64M", seed=3)
    info = {"factory": chosen.factory, **chosen.manifest(),
            "quantizer": {"file": "quantizer.faiss", "lists": chosen.params["nlist"]}}
    again = choice_from_manifest(info, 100_000, 384)
    assert (again.kind, again.factory, again.params, again.train_size, again.seed) == (
        chosen.kind, chosen.factory, chosen.params, chosen.train_size, 3)
    assert again.search_sweep == chosen.search_sweep
    # an IVF index that records no stored quantizer keeps one in every part (format 3)
    del info["quantizer"]
    assert not choice_from_manifest(info, 100_000, 384).params["shared_quantizer"]


@pytest.mark.parametrize("n", [50_000, 1_000_000, 10_000_000, 100_000_000])
def test_ivf_training_has_the_rows_faiss_asks_for_every_list(n):
    from tapt.indexer.ann.index_choice import TRAIN_PER_LIST, ivf_nlist, ivf_train_size

    nlist = ivf_nlist(n)
    assert ivf_train_size(n, nlist) >= min(n, 39 * nlist)   # faiss warns below 39 per list
    assert ivf_train_size(n, nlist) == min(n, max(10_000, TRAIN_PER_LIST * nlist))
