"""Encoder speed, side by side in one run: backends x batch sizes, against the compute bound.

For each backend it embeds the same texts (a labelled pool) and reports sentences/s, the ratio to
the torch-fp32 baseline, FLOPs per sentence (counted from the model's shapes), the achieved FLOP/s
and its fraction of the machine's *measured* matrix-multiply rate. With `--seeds`, every backend's
pool and task embeddings drive centroid and kNN selection at the oracle budget (each domain's size
in the pool, sentence level) and the selected ids are compared with torch fp32's.

    python -m benchmarks.speed_encode --pool data/sample/pool.jsonl.gz --seeds data/sample/seeds \
        --backends torch onnx onnx-int8 --out benchmarks/results/speed_encode
    python -m benchmarks.speed_encode --device cuda --backends st torch-fp32 torch-fp16 \
        torch-bf16 --batch-sizes 64 256 1024 --out $OUT/speed_encode_gpu   # on a GPU machine

`st` (and `st-fp16` on CUDA) is sentence-transformers' own `SentenceTransformer.encode` on the
same model: the baseline, measured in the same run.
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

# internal: each backend's encoder made and timed alone, on the device picked as tapt picks it
from tapt.indexer.encoding.encoder import SentenceTransformerEncoder, load_encoder, pick_device

# internal: the thread count the ONNX backend uses, reported and matched
from tapt.indexer.encoding.onnx_encoder import default_threads

# internal: the report written as tapt writes its files (temporary name, rename)
from tapt.util.files import atomic_write, write_json_atomic

# internal: the report's version stamps and time, as tapt's own files carry them
from tapt.util.versions import library_versions, utc_now

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
        info["cpu"] = next(line.split(":", 1)[1].strip() for line in text.splitlines()
                           if line.startswith("model name"))
        flags = next(line for line in text.splitlines() if line.startswith("flags")).split()
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


def model_shape(encoder) -> dict[str, int]:
    """Hidden size, feed-forward size and layer count of the encoder's transformer."""
    config = _transformer_config(encoder)
    d = int(config.hidden_size)
    return {"hidden": d, "intermediate": int(getattr(config, "intermediate_size", 4 * d)),
            "layers": int(config.num_hidden_layers)}


def sequence_flops(shape: dict[str, int], width: np.ndarray | int, rows: np.ndarray | int = 1
                   ) -> float:
    """Forward matrix-product FLOPs of `rows` sequences of `width` tokens: per layer and token
    2 x (4 d^2 + 2 d i) for the projections and feed-forward, plus 4 w d for attention scores
    and weighted values (QK^T and AV are w x w x d products each)."""
    d, i, layers = shape["hidden"], shape["intermediate"], shape["layers"]
    width = np.asarray(width, dtype=np.float64)
    per_row = layers * (2 * (4 * d * d + 2 * d * i) * width + 4 * width * width * d)
    return float(np.sum(per_row * np.asarray(rows, dtype=np.float64)))


def work_of(lengths: np.ndarray, batches: list[np.ndarray], shape: dict[str, int]
            ) -> dict[str, float]:
    """Useful FLOPs (each text at its own length) and padded FLOPs (every row of a batch at the
    batch's longest length: what a dense kernel computes) of one pass over `lengths`."""
    widths = np.array([lengths[b].max() for b in batches if len(b)])
    rows = np.array([len(b) for b in batches if len(b)])
    return {"useful": sequence_flops(shape, lengths), "padded": sequence_flops(shape, widths, rows),
            "tokens": float(lengths.sum()), "padded_tokens": float((widths * rows).sum())}


def batch_plan(encoder, lengths: np.ndarray, batch_size: int) -> list[np.ndarray]:
    """The batches `encoder.encode` forms (the ONNX path exactly; torch sorts by characters, not
    tokens, so its plan is approximated by the token sort)."""
    # internal: the batches the encoders plan, for the padding and FLOPs counted
    from tapt.indexer.encoding.batching import plan_batches

    return plan_batches(lengths, batch_size, getattr(encoder, "max_tokens", None))


def model_gemm(shape: dict[str, int], rows: int, threads: int, repeats: int = 3) -> float:
    """FLOP/s of the model's own matrix products through ONNX Runtime's MatMul (the kernel the
    encoder's graph runs): X[rows, d] times the four d x d attention projections, the d x i
    feed-forward input and the i x d output, at `threads` intra-op threads; median of `repeats`."""
    session = _gemm_session(shape, threads)
    x = np.random.default_rng(0).standard_normal((rows, shape["hidden"]), dtype=np.float32)
    d, i = shape["hidden"], shape["intermediate"]
    flops = 2 * rows * (4 * d * d + 2 * d * i)
    session.run(None, {"X": x})
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        session.run(None, {"X": x})
        times.append(time.perf_counter() - t0)
    return flops / statistics.median(times)


_GEMM_SESSIONS: dict[tuple, Any] = {}


def _gemm_session(shape: dict[str, int], threads: int):
    key = (tuple(sorted(shape.items())), threads)
    if key in _GEMM_SESSIONS:
        return _GEMM_SESSIONS[key]
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    d, i = shape["hidden"], shape["intermediate"]
    rng = np.random.default_rng(1)
    weights = {n: rng.standard_normal(s, dtype=np.float32) * 0.05
               for n, s in (("Wq", (d, d)), ("Wk", (d, d)), ("Wv", (d, d)), ("Wo", (d, d)),
                            ("W1", (d, i)), ("W2", (i, d)))}
    nodes = [helper.make_node("MatMul", ["X", w], [w.replace("W", "Y")]) for w in ("Wq", "Wk", "Wv", "Wo", "W1")]
    nodes.append(helper.make_node("MatMul", ["Y1", "W2"], ["Y2"]))
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("Yq", "Yk", "Yv", "Yo", "Y2")]
    graph = helper.make_graph(nodes, "model_gemm",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["rows", d])],
                              outputs, [numpy_helper.from_array(v, n) for n, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    _GEMM_SESSIONS[key] = session
    return session


def square_gemm(size: int = 2048, repeats: int = 3) -> float:
    """FLOP/s of one square fp32 product in numpy (its BLAS, all cores): the machine's headline
    rate, for context beside the model-shape rate; best of `repeats`."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((size, size), dtype=np.float32)
    b = rng.standard_normal((size, size), dtype=np.float32)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * size ** 3 / best


def _transformer_config(encoder):
    model = getattr(encoder, "model", None)
    if model is None:  # ONNX encoder: read the config from the model directory
        from transformers import AutoConfig

        # internal: the model's folder, for its configuration's shapes (FLOPs)
        from tapt.indexer.encoding.models import resolve_model

        return AutoConfig.from_pretrained(resolve_model(encoder.spec))
    return model[0].auto_model.config


class SentenceTransformersBaseline(SentenceTransformerEncoder):
    """sentence-transformers' own `SentenceTransformer.encode` on the same model (`st`, `st-fp16`
    on CUDA): the baseline tapt's encoders are compared with, batches formed as it forms them
    (tapt's CUDA path tokenises once and feeds length-sorted batches itself)."""

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        emb = self.model.encode(list(texts), batch_size=batch_size, normalize_embeddings=True,
                                convert_to_numpy=True, show_progress_bar=False)
        return np.ascontiguousarray(emb, dtype=np.float32)


def make_encoder(variant: str, spec: str | None, device: str, threads: int | None):
    if variant in ("st", "st-fp16"):
        if variant == "st-fp16" and device == "cpu":
            raise SystemExit("st-fp16 is a CUDA variant; on the CPU use st (fp32)")
        return SentenceTransformersBaseline(spec, device=device,
                                            dtype="float16" if variant == "st-fp16" else "float32")
    if variant.startswith("torch"):
        dtype = {"torch": "float16", "torch-fp32": "float32", "torch-fp16": "float16",
                 "torch-bf16": "bfloat16"}[variant]
        if device == "cpu" and dtype != "float32" and variant != "torch":
            raise SystemExit(f"{variant} is a CUDA variant; on the CPU use torch (fp32)")
        return SentenceTransformerEncoder(spec, device=device, dtype=dtype)
    if variant == "onnx-plain":  # the fp32 path before fusion: the plain trace, batches of texts
        # internal: the ONNX encoder's plain, unfused trace, a variant load_encoder does not make
        from tapt.indexer.encoding.onnx_encoder import OnnxEncoder

        return OnnxEncoder(SentenceTransformerEncoder(spec, device="cpu"), "onnx", threads=threads,
                           fused=False)
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
    from tapt import Index

    # internal: one index built per backend from its encoder object (Index.build takes a model
    #   name)
    from tapt.indexer.building.pipeline import BuildConfig, build_index

    # internal: each row's domain, the oracle budget of each task
    from tapt.retriever.evaluation.oracle import sentence_labels

    # internal: the selected rows of each backend, compared with the reference backend's
    from tapt.retriever.scoring.arrays import rows_of_segments
    from tapt.retriever.selections.make import SelectConfig, rank

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
    p.add_argument("--backends", nargs="+", default=["torch", "onnx-plain", "onnx", "onnx-int8"],
                   help="st (sentence-transformers' own encode: the baseline), torch, "
                        "onnx-plain (the unfused fp32 graph), onnx, onnx-int8; on CUDA st, "
                        "st-fp16, torch-fp32, torch-fp16, torch-bf16")
    p.add_argument("--agree", nargs="+", default=None,
                   help="backends whose selections --seeds compares [default: all]")
    p.add_argument("--batch-sizes", nargs="+", type=int, default=[64])
    p.add_argument("--threads", nargs="+", type=int, default=None,
                   help="ONNX Runtime thread counts to compare on the first 2,000 texts")
    p.add_argument("--repeats", type=int, default=1, help="timings per --threads setting")
    p.add_argument("--rounds", type=int, default=5,
                   help="interleaved rounds: reference GEMM rate, then every backend, per round")
    p.add_argument("--gemm-rows", type=int, default=2048,
                   help="rows (tokens) of the model-shape reference product, about a batch's tokens")
    p.add_argument("--k", type=int, default=50)
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="profile the fp32 ONNX graphs' operators on the first N texts")
    p.add_argument("--work", type=Path, default=None, help="where the --seeds indexes are built")
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/speed_encode"))
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    device = pick_device(args.device)
    if device == "cpu":  # the CPU's cores belong to ONNX Runtime's threads; a GPU host's to
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # tokenising (`st` too)
    records = read_jsonl(args.pool, args.n)
    texts = [r["text"] for r in records]
    start = time.perf_counter()
    encoders = {}
    for variant in args.backends:
        t0 = time.perf_counter()
        encoders[variant] = make_encoder(variant, args.model, device, None)
        log.info("%s loaded in %.1f s", variant, time.perf_counter() - t0)
    first = next(iter(encoders.values()))
    shape = model_shape(first)
    lengths = np.minimum(first.token_counts(texts), first.max_length).astype(np.int64)
    plans = {(v, bs): work_of(lengths, batch_plan(e, lengths, bs), shape)
             for v, e in encoders.items() for bs in args.batch_sizes}
    cells = list(plans)
    kinds = {_precision(v, device) for v in args.backends}
    threads_used = default_threads()
    rounds: list[dict[str, Any]] = []
    pool_emb: dict[str, np.ndarray] = {}  # the first batch size's embeddings, for cosines
    for b in cells:  # warm-up: sessions, thread pools, allocators
        encoders[b[0]].encode(texts[: min(len(texts), 4 * b[1])], batch_size=b[1])
    for r in range(args.rounds):
        # interleaved: each round measures the reference rate and every backend back to back,
        # starting from a different backend, so load swings fall on all of them alike
        entry: dict[str, Any] = {"load_before": round(os.getloadavg()[0], 2), "cells": {}}

        def reference() -> dict[str, float]:
            return {k: v / 1e9 for k, v in reference_rates(kinds, device, shape, args.gemm_rows,
                                                           threads_used).items()}

        before = reference()
        for c in cells[r % len(cells):] + cells[:r % len(cells)]:
            variant, bs = c
            _sync(encoders[variant])
            t0 = time.perf_counter()
            emb = encoders[variant].encode(texts, batch_size=bs)
            _sync(encoders[variant])
            seconds = time.perf_counter() - t0
            after = reference()  # each encoding is bracketed by reference measurements
            entry["cells"][f"{variant}@{bs}"] = {
                "seconds": seconds, "load": round(os.getloadavg()[0], 2),
                "gemm_gflops": {k: math.sqrt(before[k] * after[k]) for k in before}}
            before = after
            pool_emb.setdefault(variant, emb)
        entry["load_after"] = round(os.getloadavg()[0], 2)
        rounds.append(entry)
        log.info("round %d/%d (load %.1f): %s", r + 1, args.rounds, entry["load_before"],
                 {k: round(len(texts) / v["seconds"], 1) for k, v in entry["cells"].items()})
    rows = summarise(rounds, plans, texts, device)
    reference = next((b for b in ("torch", "torch-fp32") if b in pool_emb), args.backends[0])
    for row in rows:
        base = next(r for r in rows if r["backend"] == reference and r["batch_size"] == row["batch_size"])
        row["ratio_to_" + reference] = round(row["sentences_per_s"] / base["sentences_per_s"], 2)
        row["ratio_to_reference"] = row["ratio_to_" + reference]
        cos = (pool_emb[row["backend"]] * pool_emb[reference]).sum(axis=1)
        row["cosine_to_reference"] = {"mean": round(float(cos.mean()), 5), "min": round(float(cos.min()), 5)}
    tokens = lengths
    threads = []
    for n in args.threads or []:
        for variant in [b for b in args.backends if b.startswith("onnx")]:
            encoder = make_encoder(variant, args.model, "cpu", n)
            seconds, _ = timed_encode(encoder, texts[:2000], args.batch_sizes[0], args.repeats)
            threads.append({"backend": variant, "threads": n, "sentences_per_s": round(2000 / seconds, 1)})
            log.info("%s with %d threads: %.1f sentences/s", variant, n, 2000 / seconds)
    profiles = {}
    if args.profile:
        for variant in [b for b in args.backends if b in ("onnx", "onnx-plain")]:
            profiles[variant] = operator_profile(encoders[variant], texts[:args.profile],
                                                 args.batch_sizes[0])
            log.info("%s kernel time by operator: %s", variant, profiles[variant])
    agree, builds = None, None
    if args.seeds is not None:
        order = [reference] + [b for b in (args.agree or args.backends) if b != reference]
        with tempfile.TemporaryDirectory(prefix="speed-encode-", dir=args.work) as work:
            builds, agree = build_and_agree(args.pool, {b: encoders[b] for b in order},
                                            args.batch_sizes[0], args.seeds, args.seed_sentences,
                                            Path(work), k=args.k)
    result = {"created": utc_now(), "machine": machine(), "device": device,
              "threads_used": threads_used, "gemm_rows": args.gemm_rows,
              "gemm_gflops": {k: round(statistics.median(c["gemm_gflops"][k] for r in rounds
                                                         for c in r["cells"].values()), 1)
                              for k in next(iter(rounds[0]["cells"].values()))["gemm_gflops"]},
              "mean_tokens": round(float(tokens.mean()), 2), "reference": reference,
              "rows": rows, "rounds": rounds, "threads": threads, "profiles": profiles,
              "agreement": agree,
              "builds": builds,
              "arguments": {k: str(v) for k, v in vars(args).items()},
              "invocation": ["python", "-m", "benchmarks.speed_encode", *(argv if argv is not None else sys.argv[1:])],
              "seconds": round(time.perf_counter() - start, 1), "versions": library_versions()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.out.with_suffix(".json"), result)
    with atomic_write(args.out.with_suffix(".md")) as fh:
        fh.write(markdown(result))
    print(markdown(result))


def operator_profile(encoder, texts: list[str], batch_size: int) -> dict[str, float]:
    """Share of ONNX Runtime kernel time per operator type while `encoder` embeds `texts`
    (ORT's own profiler; shares within one run, so the machine's load cancels out)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = encoder.threads
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.enable_profiling = True
    with tempfile.TemporaryDirectory(prefix="speed-encode-profile-") as work:
        options.profile_file_prefix = str(Path(work) / "ort")
        session = ort.InferenceSession(str(encoder.path), options,
                                       providers=["CPUExecutionProvider"])
        own, encoder.session = encoder.session, session
        try:
            encoder.encode(texts, batch_size=batch_size)
        finally:
            encoder.session = own
        events = json.loads(Path(session.end_profiling()).read_text())
    spent: dict[str, float] = {}
    for event in events:
        if event.get("cat") == "Node" and event.get("name", "").endswith("_kernel_time"):
            op = event.get("args", {}).get("op_name", "?")
            spent[op] = spent.get(op, 0.0) + event["dur"]
    total = sum(spent.values()) or 1.0
    return {op: round(t / total, 4) for op, t in sorted(spent.items(), key=lambda x: -x[1])
            if t / total >= 0.001}


def reference_rates(kinds: set[str], device: str, shape: dict[str, int], rows: int,
                    threads: int) -> dict[str, float]:
    """This moment's reference FLOP/s per precision: on the CPU, `fp32` is the model's own
    matrix products in ONNX Runtime (`model_gemm`) and `fp32-square` numpy's square product;
    `int8` ONNX Runtime's MatMulInteger; on CUDA, torch's square products."""
    if device.startswith("cuda"):
        return {k: gemm_rate(k, device) for k in sorted(kinds | {"fp32"})}
    out = {"fp32": model_gemm(shape, rows, threads), "fp32-square": square_gemm()}
    if "int8" in kinds:
        out["int8"] = gemm_rate("int8", device, repeats=2)
    return out


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarise(rounds: list[dict[str, Any]], plans: dict[tuple, dict[str, float]],
              texts: list[str], device: str) -> list[dict[str, Any]]:
    """One row per backend and batch size: medians over rounds, and the per-round shares of the
    same round's reference rate (median, min, max)."""
    rows = []
    for (variant, bs), work in plans.items():
        key = f"{variant}@{bs}"
        precision = _precision(variant, device)
        seconds = [r["cells"][key]["seconds"] for r in rounds]
        gemm = [r["cells"][key]["gemm_gflops"] for r in rounds]
        useful = [work["useful"] / s / g[precision] / 1e9 for s, g in zip(seconds, gemm)]
        padded = [work["padded"] / s / g[precision] / 1e9 for s, g in zip(seconds, gemm)]
        row = {"backend": variant, "device": device, "batch_size": bs, "precision": precision,
               "sentences": len(texts), "rounds": len(rounds),
               "seconds": round(statistics.median(seconds), 2),
               "sentences_per_s": round(len(texts) / statistics.median(seconds), 1),
               "mflop_per_sentence": round(work["useful"] / len(texts) / 1e6, 1),
               "padding_overhead": round(work["padded"] / work["useful"] - 1, 4),
               "padded_token_share": round(work["tokens"] / work["padded_tokens"], 4),
               "useful_gflops": round(work["useful"] / statistics.median(seconds) / 1e9, 1),
               "share_useful": {k: round(v, 3) for k, v in _spread(useful).items()},
               "share_padded": {k: round(v, 3) for k, v in _spread(padded).items()}}
        if "fp32-square" in gemm[0] and precision == "fp32":
            square = [work["useful"] / s / g["fp32-square"] / 1e9 for s, g in zip(seconds, gemm)]
            row["share_useful_of_square"] = {k: round(v, 3) for k, v in _spread(square).items()}
        rows.append(row)
    return rows


def _precision(variant: str, device: str) -> str:
    if variant == "onnx-int8":
        return "int8"
    if variant in ("torch-fp16", "st-fp16") or (variant == "torch" and device.startswith("cuda")):
        return "fp16"
    return "bf16" if variant == "torch-bf16" else "fp32"


def _share(s: dict[str, float]) -> str:
    return f"{s['median']:.0%} ({s['min']:.0%}-{s['max']:.0%})"


def markdown(r: dict[str, Any]) -> str:
    m = r["machine"]
    ref = r["reference"]
    loads = [x["load_before"] for x in r["rounds"]] + [x["load_after"] for x in r["rounds"]]
    cpu = not r["device"].startswith("cuda")
    lines = [f"# Encoder speed (`benchmarks/speed_encode.py`), {r['created']}", "",
             f"Machine: {m.get('gpu') or m.get('cpu', '?')}, {m['cores']} cores, SIMD "
             f"{', '.join(m.get('simd', [])) or '?'}; device {r['device']}, "
             f"{r.get('threads_used', m['cores'])} ONNX Runtime threads. "
             f"{len(r['rounds'])} interleaved rounds: each runs every backend once on the same "
             "texts (starting from a different backend each round), each encoding bracketed by "
             "reference matrix-multiply measurements just before and after it (the geometric mean "
             "of the two is that encoding's reference); the 1-minute load average ran "
             f"{min(loads):.1f}-{max(loads):.1f} over the run (the machine is shared). Median "
             "reference rates (GFLOP/s): " + ", ".join(f"{k} {v:,.0f}" for k, v in
                                                       r["gemm_gflops"].items()) + ".",
             f"Texts: {r['rows'][0]['sentences']:,} pool sentences, {r['mean_tokens']} tokens on "
             f"average; model all-MiniLM-L6-v2 unless `--model` says otherwise. Reference: {ref}.", ""]
    if cpu:
        lines += ["Reference rates: **fp32** is the model's own matrix products (X[%d, d] times the "
                  "four d x d attention projections, d x i and i x d feed-forward) through ONNX "
                  "Runtime's MatMul at the same thread count, median of 3; fp32-square is one "
                  "2048-square product in numpy (best of 3, context only); int8 is ONNX Runtime's "
                  "MatMulInteger, 2048-square." % r.get("gemm_rows", 2048),
                  "FLOPs: only matrix products, counted from the model's shapes: useful = every "
                  "text at its own length (what the model has to compute); padded = every row of "
                  "a batch at the batch's longest length (what a dense kernel computes). Share = "
                  "useful FLOP/s of an encoding / its bracketing reference rate; padded share "
                  "likewise with padded FLOPs; median over rounds (min-max).", ""]
    lines += [f"| backend | batch | sentences/s | x {ref} | MFLOP/sent (useful) | padding overhead "
              f"| useful GFLOP/s | share of reference, useful | share, padded | useful share of "
              f"square | cosine to {ref} (mean / min) |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for row in r["rows"]:
        c = row["cosine_to_reference"]
        square = _share(row["share_useful_of_square"]) if "share_useful_of_square" in row else "-"
        lines.append(f"| {row['backend']} | {row['batch_size']} | {row['sentences_per_s']:,.1f} | "
                     f"{row['ratio_to_' + ref]:.2f} | {row['mflop_per_sentence']} | "
                     f"{row['padding_overhead']:.1%} | {row['useful_gflops']:,.1f} | "
                     f"{_share(row['share_useful'])} ({row['precision']}) | "
                     f"{_share(row['share_padded'])} | {square} | {c['mean']:.4f} / {c['min']:.4f} |")
    if r["threads"]:
        lines += ["", "ONNX Runtime threads (first 2,000 texts): " + "; ".join(
            f"{t['backend']} {t['threads']} thread(s) {t['sentences_per_s']:,.1f}/s" for t in r["threads"])]
    if r.get("profiles"):
        lines += ["", "Kernel time by operator (ONNX Runtime's profiler, first "
                  f"{r['arguments'].get('profile')} texts; Attention includes its QKV product):", ""]
        for backend, shares in r["profiles"].items():
            lines.append(f"- {backend}: " + ", ".join(f"{op} {v:.1%}" for op, v in shares.items()))
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
        lines += ["", f"Selection agreement with {ref}: the tool's own selection (`retriever.selections.make.rank`) "
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
