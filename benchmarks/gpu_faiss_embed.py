"""One GPU: an IVF build's k-means and coarse assignment through torch against FAISS on the host's
CPUs, and a build's whole embed stage against 60,000 sentences/s (a prepared check of about 8
minutes for a lent GPU machine; `--device cpu` runs the same code on the CPU at a small size).

    faiss   ROWS synthetic unit rows (Gaussian blobs, 384 dims) built as the plan builds an
            index of INDEX_ROWS rows (`choose_index`: IVF8192,PQ192x4fs at 10M): the template
            trained and the rows added through torch on the device (`coarse`: what a build
            does where a GPU is visible and faiss-gpu is not), then by FAISS on the CPU (every
            core); recall@10 of both after tapt's exact rescoring, 200 queries. Then the plan
            of `--device-index-rows` (65,536 lists at 10^9 rows) built from the same rows on
            the device alone (the CPU would take an hour or more)
    embed   the bundled sample pool repeated to SENTENCES sentences, written into a text store
            as a prepared shard, embedded in parts of PART_ROWS as a build embeds them, two
            ways: `local`, the local executor's embed stage as a build runs it (reading,
            tokenising and the model in one process); `pipeline`, the split the Ray executor
            makes, by hand: parts read and tokenised in a pool of WORKERS processes (started
            before the clock), the model on the device (IN_FLIGHT parts at once), each part
            written by `stages.save_part`. Sentences/s end to end against GOAL

    python benchmarks/gpu_faiss_embed.py $OUT/gpu_faiss_embed.json --device cuda
    python benchmarks/gpu_faiss_embed.py /tmp/gfe.json --device cpu --rows 20000 \\
        --index-rows 20000 --device-index-rows 80000 --sentences 2048 --part-rows 512 \\
        --workers 1
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_embed_pipeline as pipeline  # noqa: E402  (makes a bare checkout's `tapt` importable)

GOAL = 60_000          # sentences/s of a whole embed stage on one H100
DIM = 384


def blobs(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """`n` unit rows around 2,000 random unit centres (noise of norm ~1.2), and 200 queries
    near rows."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((2000, DIM)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    rows = centres[rng.integers(0, 2000, n)] + 1.2 / np.sqrt(DIM) * rng.standard_normal(
        (n, DIM), dtype=np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    queries = rows[rng.choice(n, 200, replace=False)] + 0.02 * rng.standard_normal(
        (200, DIM), dtype=np.float32)
    return rows, queries / np.linalg.norm(queries, axis=1, keepdims=True)


def faiss_build(rows: np.ndarray, queries: np.ndarray, choice, device: str | None,
                truth: np.ndarray | None) -> dict[str, Any]:
    """Train + add `rows` as `choice` through torch on `device` (None: FAISS on the CPU)."""
    # internal: torch k-means and assignment forced onto the device, against tapt's FAISS train and
    #   add, with their recall
    from tapt.indexer.ann import coarse
    from tapt.indexer.ann import faiss_index as fi
    from tapt.indexer.ann.ann_recall import recall_at_k

    coarse.torch_device = lambda: device        # the path `coarse.torch_device` would pick
    t0 = time.perf_counter()
    template, train_s = fi.train_template(rows, choice)
    pipeline._sync(device or "cpu")
    t1 = time.perf_counter()
    part = fi.build_part(rows, choice, template, 0)
    pipeline._sync(device or "cpu")
    add_s = time.perf_counter() - t1
    out = {"path": f"torch on {device}" if device else "faiss on the CPU",
           "train_s": round(t1 - t0, 2), "add_s": round(add_s, 2),
           "add_us_per_row": round(add_s / len(rows) * 1e6, 3)}
    if truth is not None:
        info = {"factory": choice.factory, "kind": choice.kind, "params": choice.params}
        _, ids = fi.knn_search(part, rows, queries, 10, info, nprobe=16)
        out["recall@10_nprobe_16"] = round(recall_at_k(ids, truth), 4)
    return out


def faiss_section(args, saved=lambda out: None) -> dict[str, Any]:
    # internal: the exact neighbours, and the index type a build of INDEX_ROWS rows would choose
    from tapt.indexer.ann.ann_recall import ground_truth
    from tapt.indexer.ann.index_choice import choose_index

    rows, queries = blobs(args.rows)
    _, truth = ground_truth(rows, queries, 10)
    choice = choose_index(args.index_rows, DIM, "64G", "ivfpq")
    out: dict[str, Any] = {"rows": args.rows, "factory": choice.factory,
                           "train_rows": min(choice.train_size, args.rows), "runs": []}
    for device in (args.device, None):
        out["runs"].append(faiss_build(rows, queries, choice, device, truth))
        print(json.dumps(out["runs"][-1]), flush=True)
        saved(out)
    for size in [int(x) for x in args.device_index_rows.split(",") if x]:
        big = choose_index(size, DIM, "64G", "ivfpq")      # its lists; the sample fits ROWS
        big = dataclasses.replace(big, train_size=min(big.train_size, args.rows))
        run = faiss_build(rows, queries, big, args.device, truth)
        out["runs"].append({**run, "factory": big.factory, "train_rows": big.train_size})
        print(json.dumps(out["runs"][-1]), flush=True)
        saved(out)
    return out


def _read_and_tokenize(task):
    """A pool worker's step: the part's texts from the shard's text store, tokenised."""
    # internal: a worker reads a part's texts as the embed stage does
    from tapt.indexer.building import stages

    return pipeline._tokenize(stages.part_texts(task))


def prepared_shard(work: Path, texts: list[str]) -> None:
    """`texts` as a prepared shard's text store (one document a sentence)."""
    # internal: the sample written as a prepared shard's text store, what the embed stage reads
    from tapt.indexer.building.stages import shard_path
    from tapt.indexer.store.manifest import STORE
    from tapt.indexer.store.text_store import TextStoreWriter

    store = shard_path(work, "000000") / STORE
    store.mkdir(parents=True)
    writer = TextStoreWriter(store)
    for lo in range(0, len(texts), 4096):
        writer.put_many(lo, ({"text": t, "doc": lo + i, "pos": 0, "doc_key": None,
                              "source": "sample", "meta": {}}
                             for i, t in enumerate(texts[lo:lo + 4096])))
    writer.close()


def embed_section(args, saved=lambda out: None) -> dict[str, Any]:
    import pickle

    # internal: the embed stage's own steps and the encoder it loads, timed without a build
    from tapt.indexer.building import stages
    from tapt.indexer.encoding.encoder import load_encoder, preferred_batch_size, tokenizing_of

    texts = pipeline.texts_of(args.sentences)
    work = Path(tempfile.mkdtemp(prefix="tapt-gpu-embed-"))
    try:
        prepared_shard(work, texts)
        ctx = multiprocessing.get_context("spawn")   # the pool starts before the model (fork-safe)
        encoder = load_encoder(args.model, device=args.device)
        tokenizing = tokenizing_of(encoder)
        if tokenizing is None:
            raise SystemExit(f"Error: the {encoder.backend} encoder on {encoder.device} "
                             "tokenises itself")
        batch = args.batch_size or preferred_batch_size(encoder)
        dtype = "float16"

        def tasks(run: str) -> list:
            return [stages.EmbedTask(str(work), "000000", i, lo, min(lo + args.part_rows,
                                                                     len(texts)), batch, dtype,
                                     run)
                    for i, lo in enumerate(range(0, len(texts), args.part_rows))]

        def encode_and_save(task, tokens):
            t0 = time.perf_counter()
            emb, counts = encoder.encode_tokens(tokens, batch)
            return stages.save_part(task, emb, counts, time.perf_counter() - t0, encoder.dim,
                                    encoder.max_length)

        out: dict[str, Any] = {"device": encoder.device, "backend": encoder.backend,
                               "dtype": getattr(encoder, "dtype", "float32"),
                               "sentences": len(texts), "part_rows": args.part_rows,
                               "batch_size": batch, "workers": args.workers,
                               "in_flight": args.in_flight, "goal": GOAL}
        with ctx.Pool(args.workers, initializer=pipeline._init,
                      initargs=(pickle.dumps(tokenizing),)) as pool:
            warm = tasks("warm-up")[:max(1, args.workers)]
            list(pool.imap(_read_and_tokenize, warm))
            stages.embed_part(warm[0], encoder)
            best = {"pipeline": float("inf"), "local": float("inf")}
            for r in range(args.rounds):
                for name in best:
                    shutil.rmtree(stages.shard_path(work, "000000") / stages.PARTS,
                                  ignore_errors=True)
                    todo = tasks(f"{name}-{r}")
                    t0 = time.perf_counter()
                    if name == "local":            # what the local executor runs
                        for task in todo:
                            stages.embed_part(task, encoder)
                    else:
                        tokens = pool.imap(_read_and_tokenize, todo)
                        with ThreadPoolExecutor(max_workers=args.in_flight) as feed:
                            done = [feed.submit(encode_and_save, t, tok)
                                    for t, tok in zip(todo, tokens)]
                            [d.result() for d in done]
                    pipeline._sync(encoder.device)
                    best[name] = min(best[name], time.perf_counter() - t0)
                    out[name] = {"seconds": round(best[name], 2),
                                 "sentences_per_second": round(len(texts) / best[name], 1)}
                    out["meets_goal"] = out["pipeline"]["sentences_per_second"] >= GOAL
                    saved(out)
                    print(json.dumps({name: out[name]}), flush=True)
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="the JSON file to write")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--model", default=None, help="model directory (default: packaged)")
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows of the FAISS build")
    parser.add_argument("--index-rows", type=int, default=10_000_000,
                        help="the index size whose plan (type, lists) the build follows")
    parser.add_argument("--device-index-rows", default="1000000000",
                        help="index sizes whose plan (65,536 lists at 10^9) is built on the "
                             "device alone, ROWS rows ('' for none)")
    parser.add_argument("--sentences", type=int, default=1_000_000)
    parser.add_argument("--part-rows", type=int, default=8192)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2),
                        help="processes reading and tokenising parts")
    parser.add_argument("--in-flight", type=int, default=2, help="parts on the device at once")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--skip", default="", help="faiss or embed: a section not run")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    result: dict[str, Any] = {"argv": list(argv if argv is not None else sys.argv[1:]),
                              "cpu_count": os.cpu_count(), "load_start": os.getloadavg()[0]}
    if args.device.startswith("cuda"):
        import torch

        result["gpu"] = torch.cuda.get_device_name(0)
    t0 = time.perf_counter()

    def save(section: str | None = None, value: Any = None) -> None:
        """The results so far, written after every run (a run stopped at its time limit keeps
        what it measured)."""
        if section is not None:
            result[section] = value
        result["seconds"] = round(time.perf_counter() - t0, 1)
        result["load_end"] = os.getloadavg()[0]
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.out.with_name(args.out.name + ".tmp")
        tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, args.out)

    if "faiss" not in args.skip:
        save("faiss", faiss_section(args, lambda out: save("faiss", out)))
    if "embed" not in args.skip:
        save("embed", embed_section(args, lambda out: save("embed", out)))
        print(json.dumps(result["embed"]), flush=True)
    save()
    return result


if __name__ == "__main__":
    main()
