"""Does quantising only part of the model buy int8 speed with fp32 selections?

The ONNX fp32 export is exact but 1.7x torch; full dynamic int8 is 3.7x but its selections
differ from fp32 by 2-7%. This script quantises subsets of the MatMuls of the cached fp32 export
(per-channel dynamic int8, the rest left in fp32), embeds a random sample of a labelled pool and
each domain's seeds with every variant, and compares centroid and kNN (k = 50 union) selections
with fp32's at the oracle budget (each domain's count in the sample), as `speed_encode` does on
full indexes.

    python -m benchmarks.partial_int8 --pool data/sample/pool.jsonl.gz --seeds data/sample/seeds \
        --n 6000 --out benchmarks/results/partial_int8
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.speed_encode import machine, read_jsonl

# internal: the ONNX encoder made over the cached fp32 export, its MatMuls quantised in part
from tapt.indexer.encoding.encoder import SentenceTransformerEncoder
from tapt.indexer.encoding.onnx_encoder import OnnxEncoder, default_threads

# internal: each variant's centroid selection of every domain, compared set by set with fp32's
from tapt.retriever.scoring import arrays

# internal: the report's version stamps and time, as tapt's own files carry them
from tapt.util.versions import library_versions, utc_now

log = logging.getLogger("partial_int8")

# variant -> which MatMul nodes stay fp32 (None: the fp32 export itself)
KEEP_FP32 = {
    "fp32": None,
    "int8 everything": lambda n: False,
    "int8 FFN only (attention fp32)": lambda n: "/attention/" in n,
    "int8 but FFN output fp32": lambda n: "/output/dense/" in n and "/attention/" not in n,
    "int8 FFN input only": lambda n: "/intermediate/" not in n,
    "int8 but first and last layer fp32": lambda n: "layer.0/" in n or "layer.5/" in n,
}


def variant_session(fp32: Path, keep, work: Path, name: str, threads: int):
    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    path = fp32
    if keep is not None:
        nodes = [n.name for n in onnx.load(str(fp32)).graph.node if n.op_type == "MatMul"]
        path = work / f"{len(list(work.iterdir()))}.onnx"
        root = logging.getLogger()
        level = root.level
        root.setLevel(logging.ERROR)  # the quantiser logs one INFO line per tensor
        try:
            quantize_dynamic(str(fp32), str(path), weight_type=QuantType.QInt8, per_channel=True,
                             nodes_to_exclude=[n for n in nodes if keep(n)])
        finally:
            root.setLevel(level)
        log.info("%s: %d of %d MatMuls quantised", name, sum(not keep(n) for n in nodes),
                 len(nodes))
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def selections(pool: np.ndarray, labels: np.ndarray, seeds: dict[str, np.ndarray], k: int
               ) -> dict[tuple[str, str], set[int]]:
    out = {}
    for domain, task in seeds.items():
        n = int((labels == domain).sum())
        out[("centroid", domain)] = set(arrays.rank(
            arrays.centroid_scores(pool, arrays.centroid(task)))[:n].tolist())
        sims = task @ pool.T
        out[("knn", domain)] = set(np.argsort(-sims, axis=1)[:, :k].ravel().tolist())
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pool", type=Path, default=Path("data/sample/pool.jsonl.gz"))
    p.add_argument("--seeds", type=Path, default=Path("data/sample/seeds"))
    p.add_argument("--n", type=int, default=6000, help="random pool sentences embedded")
    p.add_argument("--seed-sentences", type=int, default=300)
    p.add_argument("--k", type=int, default=50)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/partial_int8"))
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    rows = read_jsonl(args.pool)
    pick = np.sort(np.random.default_rng(0).choice(len(rows), min(args.n, len(rows)),
                                                   replace=False))
    texts = [rows[i]["text"] for i in pick]
    labels = np.array([rows[i]["domain"] for i in pick])
    seed_texts = {f.name.split(".")[0]: [r["text"] for r in read_jsonl(f, args.seed_sentences)]
                  for f in sorted(args.seeds.glob("*.jsonl*"))}
    threads = args.threads or default_threads()
    encoder = OnnxEncoder(SentenceTransformerEncoder(None, "cpu"), "onnx", threads=threads)
    results: list[dict[str, Any]] = []
    reference = ref_pool = None
    with tempfile.TemporaryDirectory() as tmp:
        for name, keep in KEEP_FP32.items():
            encoder.session = variant_session(encoder.path, keep, Path(tmp), name, threads)
            encoder.encode(texts[:256])  # warm-up
            t0 = time.perf_counter()
            pool = encoder.encode(texts)
            rate = len(texts) / (time.perf_counter() - t0)
            chosen = selections(pool, labels, {d: encoder.encode(t) for d, t in seed_texts.items()},
                                args.k)
            if reference is None:
                reference, ref_pool, base_rate = chosen, pool, rate
            overlap = {key: len(chosen[key] & reference[key]) / len(reference[key]) for key in chosen}
            row = {"variant": name, "sentences_per_s": round(rate, 1),
                   "x_onnx_fp32": round(rate / base_rate, 2),
                   "mean_cosine_to_fp32": round(float((pool * ref_pool).sum(1).mean()), 4)}
            for method in ("centroid", "knn"):
                vals = [v for (m, _), v in overlap.items() if m == method]
                row[f"{method}_overlap"] = round(float(np.mean(vals)), 4)
                row[f"{method}_overlap_worst"] = round(float(np.min(vals)), 4)
            log.info("%s", row)
            results.append(row)
    report = {"created": utc_now(), "machine": machine(), "threads": threads,
              "config": {k: str(v) for k, v in vars(args).items()}, "rows": results,
              "versions": library_versions()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    lines = [f"Partial int8 quantisation, {len(texts):,} pool sentences + "
             f"{args.seed_sentences} seeds per domain, {threads} threads, "
             f"{report['machine'].get('cpu', '')}. Overlap = shared ids / fp32's selection at "
             "the oracle budget, mean over domains (worst).", "",
             "| variant | sentences/s | x onnx fp32 | cosine to fp32 | centroid overlap | "
             "knn overlap |", "|---|---:|---:|---:|---|---|"]
    for r in results:
        lines.append(f"| {r['variant']} | {r['sentences_per_s']} | {r['x_onnx_fp32']} | "
                     f"{r['mean_cosine_to_fp32']} | {r['centroid_overlap']:.4f} "
                     f"({r['centroid_overlap_worst']:.4f}) | {r['knn_overlap']:.4f} "
                     f"({r['knn_overlap_worst']:.4f}) |")
    lines += ["", "Command: `python -m benchmarks.partial_int8 " + " ".join(sys.argv[1:] if argv is None else argv) + "`"]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
