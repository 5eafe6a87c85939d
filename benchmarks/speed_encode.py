"""Encoder speed, side by side in one run: backends x batch sizes, against the compute bound.

For each backend it embeds the same texts (a labelled pool) and reports sentences/s, the ratio to
the torch-fp32 baseline, FLOPs per sentence (counted from the model's shapes), the achieved FLOP/s
and its fraction of the machine's *measured* matrix-multiply rate. With `--seeds`, every backend's
pool and task embeddings drive centroid and kNN selection at the oracle budget (each domain's size
in the pool, sentence level) and the selected ids are compared with torch fp32's.

    python -m benchmarks.speed_encode --pool data/sample/pool.jsonl.gz --seeds data/sample/seeds \
        --backends torch onnx onnx-int8 --out benchmarks/results/speed_encode
    python -m benchmarks.speed_encode --device cuda --backends torch-fp32 torch-fp16 torch-bf16 \
        --batch-sizes 64 256 1024 --out $OUT/speed_encode_gpu            # on a GPU machine
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from tapt.indexer.encoder import SentenceTransformerEncoder, load_encoder, pick_device
from tapt.util.versions import library_versions, utc_now
from tapt.indexer.onnx_encoder import default_threads

log = logging.getLogger("speed_encode")


def read_jsonl(path: Path, limit: int | None = None) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    rows = []
    with opener(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                rows.append(json.loads(line))
                if limit and len(rows) >= limit:
                    break
    return rows


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {"platform": platform.platform(), "cores": default_threads()}
    try:
        text = Path("/proc/cpuinfo").read_text()
        info["cpu"] = next(l.split(":", 1)[1].strip() for l in text.splitlines()
                           if l.startswith("model name"))
        flags = next(l for l in text.splitlines() if l.startswith("flags")).split()
        info["simd"] = [f for f in ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8")
                        if f in flags]
    except (OSError, StopIteration):
        pass
    try:
        import torch

        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return info


def gemm_rate(kind: str, device: str, size: int = 2048, repeats: int = 5) -> float:
    """Best measured FLOP/s of a square matrix product (`fp32`, `fp16`, `bf16` in torch; `int8` in ORT)."""
    if kind == "int8":
        return _ort_int8_rate(size, repeats)
    import torch

    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[kind]
    if device.startswith("cuda"):
        size = max(size, 8192)
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    best = float("inf")
    for _ in range(repeats + 1):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        a @ b
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return 2 * size ** 3 / best


def _ort_int8_rate(size: int, repeats: int) -> float:
    """uint8 x int8 -> int32 MatMulInteger through ONNX Runtime: the int8 path quantised models use."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    weight = helper.make_tensor("B", TensorProto.INT8, [size, size],
                                rng.integers(-127, 127, (size, size), dtype=np.int8).tobytes(), raw=True)
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["A", "B"], ["Y"])], "mm",
        [helper.make_tensor_value_info("A", TensorProto.UINT8, [size, size])],
        [helper.make_tensor_value_info("Y", TensorProto.INT32, [size, size])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = default_threads()
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    a = rng.integers(0, 255, (size, size), dtype=np.uint8)
    best = float("inf")
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        session.run(None, {"A": a})
        best = min(best, time.perf_counter() - t0)
    del onnx
    return 2 * size ** 3 / best


def flops_per_token(encoder, mean_tokens: float) -> float:
    """Forward FLOPs per token of a BERT-style encoder: 2 x linear weights + attention (4 s d)."""
    config = _transformer_config(encoder)
    d, layers = config.hidden_size, config.num_hidden_layers
    inter = getattr(config, "intermediate_size", 4 * d)
    linear = 4 * d * d + 2 * d * inter
    return layers * (2 * linear + 4 * mean_tokens * d)


def _transformer_config(encoder):
    model = getattr(encoder, "model", None)
    if model is None:  # ONNX encoder: read the config from the model directory
        from transformers import AutoConfig

        from tapt.indexer.models import resolve_model

        return AutoConfig.from_pretrained(resolve_model(encoder.spec))
    return model[0].auto_model.config


def make_encoder(variant: str, spec: str | None, device: str, threads: int | None):
    if variant.startswith("torch"):
        dtype = {"torch": "float16", "torch-fp32": "float32", "torch-fp16": "float16",
                 "torch-bf16": "bfloat16"}[variant]
        if device == "cpu" and dtype != "float32" and variant != "torch":
            raise SystemExit(f"{variant} is a CUDA variant; on the CPU use torch (fp32)")
        return SentenceTransformerEncoder(spec, device=device, dtype=dtype)
    return load_encoder(spec, device=device, backend=variant, threads=threads)


def timed_encode(encoder, texts: list[str], batch_size: int, repeats: int) -> tuple[float, np.ndarray]:
    encoder.encode(texts[: min(len(texts), 4 * batch_size)], batch_size=batch_size)  # warm-up
    times, emb = [], None
    for _ in range(repeats):
        _sync(encoder)
        t0 = time.perf_counter()
        emb = encoder.encode(texts, batch_size=batch_size)
        _sync(encoder)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), emb


def _sync(encoder) -> None:
    if encoder.device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def build_and_agree(pool: Path, encoders: dict[str, Any], batch_size: int, seeds: Path,
                    seed_sentences: int, work: Path, sizes: tuple[int, ...] = (1, 15),
                    k: int = 50) -> tuple[dict[str, Any], dict[str, Any]]:
    """Build one index of `pool` per backend (timed end to end) and compare the tool's own centroid
    and kNN selections at the oracle budget with the reference backend's (the first one)."""
    from tapt.indexer.build import BuildConfig, build_index
    from tapt.indexer.index import Index
    from tapt.retriever.oracle import sentence_labels
    from tapt.retriever.scoring import rows_of_segments
    from tapt.retriever.select import SelectConfig, rank

    builds, chosen = {}, {}
    for variant, encoder in encoders.items():
        out = work / f"ix-{variant}"
        t0 = time.perf_counter()
        manifest = build_index([pool], out, encoder, BuildConfig(split=False, batch_size=batch_size,
                                                                 progress=False, overwrite=True))
        seconds = time.perf_counter() - t0
        n = manifest["counts"]["sentences"]
        builds[variant] = {"sentences": n, "seconds": round(seconds, 1),
                           "sentences_per_s": round(n / seconds, 1),
                           "embed_sentences_per_s": manifest["build"]["sentences_per_second"]}
        log.info("%s: built %d sentences in %.1f s", variant, n, seconds)
        index = Index(out)
        labels = sentence_labels(index, "domain")
        chosen[variant] = {}
        for seed_file in sorted(seeds.glob("*.jsonl.gz")):
            domain = seed_file.name.split(".")[0]
            budget = int((labels == domain).sum())
            if not budget:
                continue
            task = encoder.encode([r["text"] for r in read_jsonl(seed_file, seed_sentences)])
            for size in sizes:
                for method in ("centroid", "knn"):
                    config = SelectConfig(method=method, budget=f"{budget}sent", segment_size=size,
                                          **({"k": k} if method == "knn" else {}))
                    ranking, view = rank(index, config, task)
                    chosen[variant][(domain, size, method)] = rows_of_segments(view.offsets,
                                                                               ranking.segments)
    reference = next(iter(encoders))
    agree: dict[str, Any] = {}
    for variant in encoders:
        table = {}
        for key, ref in chosen[reference].items():
            got = chosen[variant][key]
            overlap = len(np.intersect1d(got, ref)) / max(len(ref), 1)
            table.setdefault(f"{key[2]}@{key[1]}", []).append(overlap)
        agree[variant] = {name: {"mean": round(float(np.mean(v)), 4), "min": round(float(np.min(v)), 4)}
                          for name, v in table.items()}
    return builds, agree


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pool", type=Path, default=Path("data/sample/pool.jsonl.gz"),
                   help="JSONL(.gz) of one sentence per record (field text, optional domain)")
    p.add_argument("--n", type=int, default=None, help="first N pool records [default: all]")
    p.add_argument("--seeds", type=Path, default=None,
                   help="directory of <domain>.jsonl.gz task files: measure selection agreement")
    p.add_argument("--seed-sentences", type=int, default=300)
    p.add_argument("--model", default=None)
    p.add_argument("--device", default="cpu")
    p.add_argument("--backends", nargs="+", default=["torch", "onnx", "onnx-int8"])
    p.add_argument("--batch-sizes", nargs="+", type=int, default=[64])
    p.add_argument("--threads", nargs="+", type=int, default=None,
                   help="ONNX Runtime thread counts to compare on the first 2,000 texts")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--k", type=int, default=50)
    p.add_argument("--work", type=Path, default=None, help="where the --seeds indexes are built")
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/speed_encode"))
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    device = pick_device(args.device)
    records = read_jsonl(args.pool, args.n)
    texts = [r["text"] for r in records]
    labels = np.array([r.get("domain", "") for r in records])
    start = time.perf_counter()
    rates = {"fp32": gemm_rate("fp32", device)}
    if device.startswith("cuda"):
        rates.update(fp16=gemm_rate("fp16", device), bf16=gemm_rate("bf16", device))
    else:
        rates["int8"] = gemm_rate("int8", device)
    log.info("measured matrix-multiply rates (GFLOP/s): %s",
             {k: round(v / 1e9) for k, v in rates.items()})
    rows: list[dict[str, Any]] = []
    pool_emb: dict[str, np.ndarray] = {}  # the first batch size's embeddings, for cosines
    encoders = {}
    tokens = None
    for variant in args.backends:
        t0 = time.perf_counter()
        encoder = make_encoder(variant, args.model, device, None)
        load_s = time.perf_counter() - t0
        encoders[variant] = encoder
        if tokens is None:
            tokens = np.minimum(encoder.token_counts(texts), encoder.max_length)
        per_sentence = flops_per_token(encoder, float(tokens.mean())) * float(tokens.mean())
        precision = _precision(variant, device)
        for bs in args.batch_sizes:
            seconds, emb = timed_encode(encoder, texts, bs, args.repeats)
            rate = len(texts) / seconds
            achieved = rate * per_sentence
            rows.append({"backend": variant, "device": device, "batch_size": bs,
                         "sentences": len(texts), "seconds": round(seconds, 2),
                         "sentences_per_s": round(rate, 1), "load_s": round(load_s, 1),
                         "mflop_per_sentence": round(per_sentence / 1e6, 1),
                         "achieved_gflops": round(achieved / 1e9, 1), "precision": precision,
                         "fraction_of_measured_gemm": round(achieved / rates[precision], 3)})
            log.info("%s batch %d: %.1f sentences/s", variant, bs, rate)
            pool_emb.setdefault(variant, emb)
    reference = next((b for b in ("torch", "torch-fp32") if b in pool_emb), args.backends[0])
    for row in rows:
        base = next(r for r in rows if r["backend"] == reference and r["batch_size"] == row["batch_size"])
        row["ratio_to_" + reference] = round(row["sentences_per_s"] / base["sentences_per_s"], 2)
        cos = (pool_emb[row["backend"]] * pool_emb[reference]).sum(axis=1)
        row["cosine_to_reference"] = {"mean": round(float(cos.mean()), 5), "min": round(float(cos.min()), 5)}
    threads = []
    for n in args.threads or []:
        for variant in [b for b in args.backends if b.startswith("onnx")]:
            encoder = load_encoder(args.model, device="cpu", backend=variant, threads=n)
            seconds, _ = timed_encode(encoder, texts[:2000], args.batch_sizes[0], args.repeats)
            threads.append({"backend": variant, "threads": n, "sentences_per_s": round(2000 / seconds, 1)})
            log.info("%s with %d threads: %.1f sentences/s", variant, n, 2000 / seconds)
    agree, builds = None, None
    if args.seeds is not None:
        import tempfile

        order = [reference] + [b for b in args.backends if b != reference]
        with tempfile.TemporaryDirectory(prefix="speed-encode-", dir=args.work) as work:
            builds, agree = build_and_agree(args.pool, {b: encoders[b] for b in order},
                                            args.batch_sizes[0], args.seeds, args.seed_sentences,
                                            Path(work), k=args.k)
    result = {"created": utc_now(), "machine": machine(), "device": device,
              "gemm_gflops": {k: round(v / 1e9, 1) for k, v in rates.items()},
              "mean_tokens": round(float(tokens.mean()), 2), "reference": reference,
              "rows": rows, "threads": threads, "agreement": agree, "builds": builds,
              "arguments": {k: str(v) for k, v in vars(args).items()},
              "invocation": ["python", "-m", "benchmarks.speed_encode", *(argv if argv is not None else sys.argv[1:])],
              "seconds": round(time.perf_counter() - start, 1), "versions": library_versions()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    args.out.with_suffix(".md").write_text(markdown(result), encoding="utf-8")
    print(markdown(result))


def _precision(variant: str, device: str) -> str:
    if variant == "onnx-int8":
        return "int8"
    if variant in ("torch-fp16",) or (variant == "torch" and device.startswith("cuda")):
        return "fp16"
    return "bf16" if variant == "torch-bf16" else "fp32"


def markdown(r: dict[str, Any]) -> str:
    m = r["machine"]
    ref = r["reference"]
    lines = [f"# Encoder speed (`benchmarks/speed_encode.py`), {r['created']}", "",
             f"Machine: {m.get('gpu') or m.get('cpu', '?')}, {m['cores']} cores, SIMD "
             f"{', '.join(m.get('simd', [])) or '?'}; device {r['device']}. Measured matrix-multiply "
             f"rate (GFLOP/s, best of 5 square products): "
             + ", ".join(f"{k} {v:,.0f}" for k, v in r["gemm_gflops"].items()) + ".",
             f"Texts: {r['rows'][0]['sentences']:,} pool sentences, {r['mean_tokens']} tokens on "
             f"average; model all-MiniLM-L6-v2 unless `--model` says otherwise. Reference: {ref}.", "",
             f"| backend | batch | sentences/s | x {ref} | MFLOP/sent | GFLOP/s | of measured GEMM | cosine to {ref} (mean / min) |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for row in r["rows"]:
        c = row["cosine_to_reference"]
        lines.append(f"| {row['backend']} | {row['batch_size']} | {row['sentences_per_s']:,.1f} | "
                     f"{row['ratio_to_' + ref]:.2f} | {row['mflop_per_sentence']} | "
                     f"{row['achieved_gflops']:,.1f} | {row['fraction_of_measured_gemm']:.0%} "
                     f"({row['precision']}) | {c['mean']:.4f} / {c['min']:.4f} |")
    if r["threads"]:
        lines += ["", "ONNX Runtime threads (first 2,000 texts): " + "; ".join(
            f"{t['backend']} {t['threads']} thread(s) {t['sentences_per_s']:,.1f}/s" for t in r["threads"])]
    if r.get("builds"):
        lines += ["", "End-to-end `build_index` of the whole pool (read, embed, LMDB, FAISS; "
                  f"batch {r['rows'][0]['batch_size']}):", "",
                  "| backend | sentences | build s | sentences/s end to end | embedding only |",
                  "|---|---:|---:|---:|---:|"]
        for backend, b in r["builds"].items():
            lines.append(f"| {backend} | {b['sentences']:,} | {b['seconds']} | {b['sentences_per_s']:,.1f} | "
                         f"{b['embed_sentences_per_s']:,.1f} |")
    if r["agreement"]:
        names = list(next(iter(r["agreement"].values())))
        lines += ["", f"Selection agreement with {ref}: the tool's own selection (`retriever.select.rank`) "
                  "on each backend's index with the task embedded by the same backend, budget = each "
                  "domain's pool size in sentences, at segment size 1 and 15; overlap = shared "
                  "sentence ids / reference selection; mean over domains (worst domain):", "",
                  "| backend | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
        for backend, row in r["agreement"].items():
            lines.append(f"| {backend} | " + " | ".join(
                f"{row[n]['mean']:.4f} ({row[n]['min']:.4f})" for n in names) + " |")
    lines += ["", f"Total {r['seconds']} s. Command: `{' '.join(r['invocation'])}`", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
