"""benchmarks/scale_projection.py on the committed measurements: its cells are the measured
per-row costs times the rows, tagged (m)/(p), and a new driver-memory size joins the fit."""

from __future__ import annotations

import json
import shutil

import pytest

from benchmarks.scale_projection import RESULTS, SIZES, fmt, markdown, measure_index, project
from tapt.indexer.ann.index_choice import ivf_nlist, ivf_train_size

USED = ["scale", "quality/codes_precision.json", "gpu_build.json", "speed_encode.json",
        "ray/gpu_embed_pipeline_h100.json", "gpu_faiss_embed.json"]


def cells(report, section, name):
    return next(r for r in report[section] if r["name"] == name)["cells"]


@pytest.fixture(scope="module")
def report():
    return project(RESULTS)


def test_cells_are_per_row_costs_times_rows(report):
    i = {k: x["value"] for k, x in report["inputs"].items()}
    assert i["embed_b_row"] == 768 and i["codes_b_row"] == 384
    disk = cells(report, "disk", "float16 embeddings")
    assert disk[str(10**9)] == {"value": pytest.approx(0.768), "unit": "TB", "tag": "projected"}
    train = cells(report, "build", "train (one task), one 2-core node")[str(10**10)]["value"]
    n = 10**10
    expect = i["train_ns_row_list"] * 1e-9 * ivf_train_size(n, ivf_nlist(n)) * ivf_nlist(n) / 3600
    assert train == (pytest.approx(expect), pytest.approx(expect))
    sel = json.loads((RESULTS / "scale/select_latency.json").read_text())
    best = next(r for r in sel["results"] if r["rows"] == sel["synthetic"]["rows"]
                and r["budget"] == "10000sent")["exact"]["best_s"]
    one = cells(report, "latency", "centroid 10000sent, exact, one process")
    assert one[str(10**9)]["value"] == pytest.approx(best * 10**9 / sel["synthetic"]["rows"])
    assert next(r for r in report["latency"] if r["name"].startswith("centroid 10000sent, "
                                                                      "exact, one"))["measured"]


def test_a_cluster_trains_and_adds_on_its_gpus_or_its_cores(report):
    from benchmarks.scale_projection import ASSUME, gpu_add_us, gpu_train_ns

    i = {k: x["value"] for k, x in report["inputs"].items()}
    runs = json.loads((RESULTS / "gpu_faiss_embed.json").read_text())["runs"]
    assert i["embed_gpu_rows_s_high"] == runs["embed"]["pipeline"]["sentences_per_second"]
    assert i["gpu_add_us_row_8192"] == runs["faiss"]["runs"][0]["add_us_per_row"]
    # linear in the lists through the two measured counts, and past them
    assert gpu_add_us(i, 8192) == pytest.approx(i["gpu_add_us_row_8192"])
    assert gpu_add_us(i, 65536) == pytest.approx(i["gpu_add_us_row_65536"])
    slope = (i["gpu_add_us_row_65536"] - i["gpu_add_us_row_8192"]) / (65536 - 8192)
    assert gpu_add_us(i, 262144) == pytest.approx(i["gpu_add_us_row_65536"] + slope * 196608)
    assert gpu_train_ns(i, 16384) == i["gpu_train_ns_row_list_8192"]       # the nearest count
    assert gpu_train_ns(i, 262144) == i["gpu_train_ns_row_list_65536"]
    n, k = 10**10, ASSUME["small_nodes"]
    low, high = cells(report, "build", f"index (FAISS add), {k} nodes")[str(n)]["value"]
    assert low == pytest.approx(n * gpu_add_us(i, ivf_nlist(n)) * 1e-6 / k / 3600)
    assert high > 5 * low
    low, _ = cells(report, "build", f"train (one task), {k} nodes")[str(n)]["value"]
    assert low == pytest.approx(gpu_train_ns(i, ivf_nlist(n)) * 1e-9 * ivf_nlist(n)
                                * ivf_train_size(n, ivf_nlist(n)) / 3600)


def test_limits_and_marks(report):
    auto = next(x for x in report["limits"] if x["what"].startswith("`auto`"))["cells"]
    # sized by one shard's part (2M rows), not the whole index: no size is refused
    assert not any(c["over"] for c in auto.values())
    assert "a part" in auto[str(10**10)]["value"]
    text = markdown(report)
    assert "(p)" in text and "#### Limits reached" in text and "scale/select_latency.json" in text
    assert fmt({"value": (0.5, 0.75), "unit": "h", "tag": "projected"}) == "30-45 min (p)"
    assert fmt({"value": 2.0, "unit": "GB", "tag": "measured"}) == "2 GB (m)"


def copy_results(tmp_path):
    for rel in USED:
        src, dst = RESULTS / rel, tmp_path / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dst)
    return tmp_path / "scale/driver_memory.json"


def test_a_new_driver_memory_size_joins_the_fit(tmp_path):
    path = copy_results(tmp_path)
    dm = json.loads(path.read_text())
    before = cells(project(tmp_path), "memory", "driver peak, centroid (budget 10000sent)")
    dm["records"].append({"method": "centroid", "rows": SIZES[0], "peak_mb": 999.0})
    path.write_text(json.dumps(dm))
    after = project(tmp_path)
    got = cells(after, "memory", "driver peak, centroid (budget 10000sent)")
    assert got[str(SIZES[0])] == {"value": 0.999, "unit": "GB", "tag": "measured"}
    assert before[str(SIZES[0])]["tag"] == "projected"
    assert got[str(SIZES[1])]["value"] != before[str(SIZES[1])]["value"]
    row = next(r for r in after["memory"] if r["name"].startswith("driver peak, centroid"))
    assert row["measured"].startswith("100M: 999 MB (m)")


def test_one_measured_size_draws_no_driver_line(tmp_path):
    path = copy_results(tmp_path)
    dm = json.loads(path.read_text())
    dm["records"] = [r for r in dm["records"] if r.get("rows") == 1_000_000]
    path.write_text(json.dumps(dm))
    report = project(tmp_path)
    assert not [r for r in report["memory"] if r["name"].startswith("driver peak")]
    assert not [x for x in report["limits"] if "worst method" in x["what"]]


def test_measure_index_counts_bytes_per_sentence(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"counts": {"sentences": 4}}))
    for shard in ("000000", "000001"):
        (tmp_path / "shards" / shard / "text.lmdb").mkdir(parents=True)
        (tmp_path / "shards" / shard / "embeddings.npy").write_bytes(b"x" * 8)
        (tmp_path / "shards" / shard / "text.lmdb" / "data.mdb").write_bytes(b"x" * 6)
    got = measure_index(tmp_path)
    assert got["bytes_per_row"] == {"embeddings.npy": 4.0, "text.lmdb/data.mdb": 3.0}
