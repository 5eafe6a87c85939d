"""Host-side tokenisation rate: what feeds an encoder, per core count.

A GPU embeds all-MiniLM-L6-v2 far faster than one core tokenises (an H100 computes the model's
~0.63 GFLOP per sentence in microseconds), so the encoder's host work decides its rate there.
This measures, on the same texts and in one run:

- *tokenizer call*: `tokenizer(texts, truncation=True, max_length=...)` and the flat int64
  columns built from its lists (what `indexer.encoding.batching.SortedBatches` did before it used the
  backend; `TOKENIZERS_PARALLELISM` as the environment sets it);
- *backend, T threads*: `indexer.encoding.batching.tokenize`, the fast tokenizer's Rust backend in chunks
  on T threads (offsets not computed), the same columns;
- *token counts*: `indexer.encoding.batching.token_lengths` (untruncated, what the build stores), on
  every usable core;
- *CUDA path, model stubbed*: the encoder's whole CUDA path on the CPU with a model that
  returns zeros: the host's ceiling for that path.

Every path's ids are checked equal to the tokenizer call's before a time is reported.

    python -m benchmarks.tokenize_speed --pool data/sample/pool.jsonl.gz \
        --out benchmarks/results/tokenize_speed
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from benchmarks.speed_encode import machine, read_jsonl

# internal: the encoders' own tokenising and token counts, timed per thread count
from tapt.indexer.encoding.batching import CHUNK, token_lengths, tokenize

# internal: the report written as tapt writes its files (temporary name, rename)
from tapt.util.files import atomic_write, write_json_atomic

# internal: the cores tapt would use here, the top of the thread counts
from tapt.util.machine import usable_cores

# internal: the report's version stamps and time, as tapt's own files carry them
from tapt.util.versions import library_versions, utc_now

NAMES = ("input_ids", "attention_mask", "token_type_ids")


def tokenizer_call(tokenizer: Any, texts: list[str], max_length: int
                   ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The plain tokenizer call and flat columns from its lists."""
    encoded = tokenizer(texts, truncation=True, max_length=max_length, add_special_tokens=True)
    lengths = np.fromiter((len(x) for x in encoded["input_ids"]), dtype=np.int64, count=len(texts))
    total = int(lengths.sum())
    return lengths, {n: np.fromiter(itertools.chain.from_iterable(encoded[n]), dtype=np.int64,
                                    count=total) for n in NAMES if n in encoded}


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Median seconds of `repeats` calls, and the last call's result."""
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def stubbed_cuda_path(model: str | None, texts: list[str], batch_size: int, repeats: int
                      ) -> float:
    """Median seconds of the CUDA encoding path's host work: `_encode_cuda` run on the CPU with
    the model stubbed (a zero vector per row, at once) and pinning a no-op. Tokenising, sorting,
    padding one batch ahead, tensors and the loop: the rate no GPU can raise."""
    import torch

    # internal: the encoder's whole tokenising path, timed beside its pieces
    from tapt.indexer.encoding.encoder import SentenceTransformerEncoder

    encoder = SentenceTransformerEncoder(model, device="cpu")
    real = encoder.model

    class Stub:
        tokenizer = real.tokenizer

        def __call__(self, features):
            return {"sentence_embedding": torch.zeros((features["input_ids"].shape[0],
                                                       encoder.dim))}

    pin = torch.Tensor.pin_memory
    encoder.model, torch.Tensor.pin_memory = Stub(), (lambda self: self)
    try:
        seconds, out = timed(lambda: encoder._encode_cuda(texts, batch_size), repeats)
    finally:
        encoder.model, torch.Tensor.pin_memory = real, pin
    if out.shape != (len(texts), encoder.dim):
        raise RuntimeError(f"the stubbed CUDA path returned {out.shape}")
    return seconds


def thread_counts(cores: int) -> list[int]:
    counts = [1]
    while counts[-1] * 2 <= cores:
        counts.append(counts[-1] * 2)
    return counts + ([cores] if counts[-1] != cores else [])


def markdown(report: dict[str, Any]) -> str:
    """The Markdown table of a `tokenize_speed.json` report."""
    cpu = report["machine"].get("cpu", "unknown CPU")
    lines = [f"# Host tokenisation (`benchmarks/tokenize_speed.py`), {report['date']}", "",
             f"Machine: {cpu}, {report['usable_cores']} usable cores. {report['texts']:,} pool sentences, "
             f"{report['tokens_per_text']} tokens on average (truncated at {report['max_length']}); "
             f"median of {report['repeats']} runs each. Every path's ids, masks and type ids were "
             "checked equal to the tokenizer call's. *parallelism*: `TOKENIZERS_PARALLELISM`, "
             "which lets the Rust library spread one call over the cores itself (`make` and the "
             "tests set it false; the tokenizers library turns it off in a forked process "
             "that used it before); *threads*: tapt's own threads, each tokenising a chunk of "
             f"{CHUNK} texts into arrays (the GIL is released while Rust runs). x call: against the tokenizer call "
             "with parallelism false. *CUDA path, model stubbed*: the encoder's CUDA path "
             "(`_encode_cuda`: tokenising, sorting, padding one batch ahead, tensors, the "
             "loop) run on the CPU with a model that returns zeros and pinning a no-op: the "
             "host's ceiling for that path, whatever the GPU.", "",
             "| path | parallelism | threads | µs/sentence | sentences/s | x call |",
             "|---|---|---:|---:|---:|---:|"]
    for row in report["rows"]:
        lines.append(f"| {row['path']} | {row['parallelism']} | {row['threads'] or '-'} | "
                     f"{row['us_per_sentence']} | {row['sentences_per_s']:,} | {row['x_call']} |")
    lines += ["", f"Command: `{report['command']}`", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pool", type=Path, default=Path("data/sample/pool.jsonl.gz"))
    p.add_argument("--n", type=int, default=None, help="first N texts of the pool [all]")
    p.add_argument("--model", default=None, help="model directory or name [packaged default]")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=1024,
                   help="batch of the stubbed CUDA path [1024, the CUDA default]")
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/tokenize_speed"))
    args = p.parse_args(argv)
    from transformers import AutoTokenizer

    # internal: the model's folder, for its tokenizer
    from tapt.indexer.encoding.models import resolve_model

    texts = [r["text"] for r in read_jsonl(args.pool, args.n)]
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(args.model))
    max_length = 256  # the default model's max_seq_length
    cores = usable_cores()
    full = np.fromiter((len(x) for x in tokenizer(texts, add_special_tokens=True)["input_ids"]),
                       dtype=np.int64, count=len(texts))
    rows: list[dict[str, Any]] = []
    before = os.environ.get("TOKENIZERS_PARALLELISM")
    try:
        for parallelism in ("false", "true"):  # read by the Rust library at every call
            os.environ["TOKENIZERS_PARALLELISM"] = parallelism
            seconds, (ref_lengths, ref_columns) = timed(
                lambda: tokenizer_call(tokenizer, texts, max_length), args.repeats)
            rows.append({"path": "tokenizer call", "parallelism": parallelism, "threads": None,
                         "seconds": seconds})
            for threads in thread_counts(cores):
                seconds, (lengths, columns) = timed(
                    lambda: tokenize(tokenizer, texts, max_length, NAMES, threads=threads),
                    args.repeats)
                if not (np.array_equal(lengths, ref_lengths)
                        and columns.keys() == ref_columns.keys()
                        and all(np.array_equal(columns[k], ref_columns[k]) for k in columns)):
                    print(f"backend at {threads} threads differs from the tokenizer call",
                          file=sys.stderr)
                    return 1
                rows.append({"path": "backend", "parallelism": parallelism, "threads": threads,
                             "seconds": seconds})
            seconds, counts = timed(lambda: token_lengths(tokenizer, texts), args.repeats)
            if not np.array_equal(counts, full):
                print("token counts differ from the tokenizer call", file=sys.stderr)
                return 1
            rows.append({"path": "token counts", "parallelism": parallelism, "threads": cores,
                         "seconds": seconds})
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
        rows.append({"path": f"CUDA path, model stubbed (batch {args.batch_size})",
                     "parallelism": "false", "threads": cores,
                     "seconds": stubbed_cuda_path(args.model, texts, args.batch_size,
                                                  args.repeats)})
    finally:
        if before is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = before
    base = rows[0]["seconds"]  # the tokenizer call without the library's own threads
    for row in rows:
        row["us_per_sentence"] = round(row["seconds"] / len(texts) * 1e6, 2)
        row["sentences_per_s"] = round(len(texts) / row["seconds"])
        row["x_call"] = round(base / row["seconds"], 2)
        row["seconds"] = round(row["seconds"], 4)
    report = {"date": utc_now(), "machine": machine(), "usable_cores": cores,
              "texts": len(texts), "tokens_per_text": round(float(ref_lengths.mean()), 2),
              "max_length": max_length, "repeats": args.repeats,
              "versions": library_versions(), "rows": rows,
              "command": " ".join(["python -m benchmarks.tokenize_speed", *(argv or sys.argv[1:])])}
    args.out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.out / "tokenize_speed.json", report)
    text = markdown(report)
    with atomic_write(args.out / "tokenize_speed.md") as fh:
        fh.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
