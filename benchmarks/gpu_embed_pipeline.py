"""The Ray embed pipeline's split, without Ray, beside the local encoder: sentences/s on one
device (a GPU check that fits the device machine, where the Ray wheel cannot travel).

The same texts (the bundled sample `data/sample/pool.jsonl.gz`, repeated to N sentences) in
parts of R rows, embedded two ways:

    local      the encoder as a build's embed stage runs it in one process: per part,
               `encode_counted` (tokenising on every core, then the model)
    pipeline   tokenising apart: a pool of W processes tokenises parts ahead (the encoder's
               own `Tokenizing`, pickled to them), the model runs `encode_tokens` on them, K
               parts in flight (threads feeding the device; each pads its next batch ahead)

Both give each part's embeddings and token counts; they must agree (largest difference
printed). Best of `--rounds` for each, run alternately after a warm-up part. Writes JSON to the
path given.

    python benchmarks/gpu_embed_pipeline.py $OUT/gpu_embed_pipeline.json --device cuda
    python benchmarks/gpu_embed_pipeline.py /tmp/x.json --device cpu --sentences 512 \\
        --part-rows 128 --workers 1 --rounds 1                   # a quick check on the CPU
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Sequence

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

try:
    import tapt  # noqa: F401
except ImportError:     # a bare checkout (the GPU machine): the repository root is the package
    import importlib.util

    _spec = importlib.util.spec_from_file_location("tapt", REPO / "__init__.py",
                                                   submodule_search_locations=[str(REPO)])
    _module = importlib.util.module_from_spec(_spec)
    sys.modules["tapt"] = _module
    _spec.loader.exec_module(_module)

SAMPLE = REPO / "data" / "sample" / "pool.jsonl.gz"
_TOKENIZING: Any = None


def _init(blob: bytes) -> None:
    import pickle

    global _TOKENIZING
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _TOKENIZING = pickle.loads(blob)


def _tokenize(texts: list[str]):
    return _TOKENIZING(texts, threads=1)


def texts_of(n: int) -> list[str]:
    with gzip.open(SAMPLE, "rt", encoding="utf-8") as fh:
        pool = [json.loads(line)["text"] for line in fh]
    return [pool[i % len(pool)] for i in range(n)]


def run_local(encoder, parts: list[list[str]], batch_size: int):
    # internal: the embed stage's own per-part encoding, timed without a build
    from tapt.indexer.encoding.encoder import encode_counted

    return [encode_counted(encoder, part, batch_size=batch_size) for part in parts]


def run_pipeline(encoder, parts: list[list[str]], batch_size: int, pool, in_flight: int):
    """Parts tokenised by `pool` (in order, ahead of the model), embedded `in_flight` at a
    time."""
    tokens = pool.imap(_tokenize, parts)
    with ThreadPoolExecutor(max_workers=in_flight) as feed:
        futures = [feed.submit(encoder.encode_tokens, t, batch_size) for t in tokens]
        return [f.result() for f in futures]


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="the JSON file to write")
    parser.add_argument("--model", default=None, help="model directory (default: packaged)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--sentences", type=int, default=163840)
    parser.add_argument("--part-rows", type=int, default=4096)
    parser.add_argument("--batch-size", type=int, default=None,
                        help="texts per batch (default: the encoder's preferred)")
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2),
                        help="tokenising processes")
    parser.add_argument("--in-flight", type=int, default=2, help="parts on the device at once")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    import pickle

    # internal: the encoder, its batch size and its tokenising, split as the Ray pipeline splits
    #   them
    from tapt.indexer.encoding.encoder import load_encoder, preferred_batch_size, tokenizing_of

    texts = texts_of(args.sentences)
    parts = [texts[i:i + args.part_rows] for i in range(0, len(texts), args.part_rows)]
    # the tokenising processes start before the model touches the device (fork-safe)
    ctx = multiprocessing.get_context("spawn")
    t0 = time.perf_counter()
    encoder = load_encoder(args.model, device=args.device)
    load_s = time.perf_counter() - t0
    tokenizing = tokenizing_of(encoder)
    if tokenizing is None:
        sys.exit(f"Error: the {encoder.backend} encoder on {encoder.device} tokenises itself")
    batch = args.batch_size or preferred_batch_size(encoder)
    result: dict[str, Any] = {"device": encoder.device, "backend": encoder.backend,
                              "dtype": getattr(encoder, "dtype", "float32"),
                              "sentences": len(texts), "part_rows": args.part_rows,
                              "parts": len(parts), "batch_size": batch,
                              "tokenize_workers": args.workers, "in_flight": args.in_flight,
                              "cpu_count": os.cpu_count(), "model_load_s": round(load_s, 2)}
    if encoder.device.startswith("cuda"):
        import torch

        result["gpu"] = torch.cuda.get_device_name(0)
    with ctx.Pool(args.workers, initializer=_init,
                  initargs=(pickle.dumps(tokenizing),)) as pool:
        run_local(encoder, parts[:1], batch)                   # warm-up: kernels, pool
        run_pipeline(encoder, parts[:args.workers], batch, pool, args.in_flight)
        _sync(encoder.device)
        best = {"local": float("inf"), "pipeline": float("inf")}
        got: dict[str, Any] = {}
        for _ in range(args.rounds):
            for name in ("local", "pipeline"):
                t0 = time.perf_counter()
                out = (run_local(encoder, parts, batch) if name == "local" else
                       run_pipeline(encoder, parts, batch, pool, args.in_flight))
                _sync(encoder.device)
                best[name] = min(best[name], time.perf_counter() - t0)
                got[name] = out
        t0 = time.perf_counter()
        list(pool.imap(_tokenize, parts))
        tokenize_s = time.perf_counter() - t0
    diff = max(float(np.abs(a[0] - b[0]).max()) for a, b in zip(got["local"], got["pipeline"]))
    same_counts = all(np.array_equal(a[1], b[1]) for a, b in zip(got["local"],
                                                                 got["pipeline"]))
    for name, seconds in best.items():
        result[name] = {"seconds": round(seconds, 3),
                        "sentences_per_second": round(len(texts) / seconds, 1)}
    result["tokenize_only"] = {"seconds": round(tokenize_s, 3),
                               "sentences_per_second": round(len(texts) / tokenize_s, 1)}
    result["max_abs_difference"] = diff
    result["same_token_counts"] = same_counts
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"local    {result['local']['sentences_per_second']:>10,.0f} sentences/s")
    print(f"pipeline {result['pipeline']['sentences_per_second']:>10,.0f} sentences/s "
          f"({args.workers} tokenising processes, {args.in_flight} parts in flight)")
    print(f"tokenise {result['tokenize_only']['sentences_per_second']:>10,.0f} sentences/s; "
          f"largest difference {diff:.2e}; same token counts: {same_counts}")
    return result


if __name__ == "__main__":
    main()
