#!/usr/bin/env python
"""Task-tuned cosine (`tapt select centroid --tuned-model`) beside plain centroid and fused.

For each domain of the labelled pool: the task is a seeded subset of the domain's seed sentences
(`seed_subset`, repeat 0, as `tapt bench recall`), the oracle is the pool sentences labelled with
the domain, the budget is the oracle's size in sentences (or `--budget` sentences), segment size
1, sentence context. The tuned encoder is `tapt train` (masked-LM continued pretraining of the
index's model) on the task alone for `--steps` CPU steps (an index of the task's sentences and a
selection of all of them, mixed 1:1 with the task); centroid with `--tuned-model` then rescores
`--candidates` (3x the budget) of the stored ranking. Costs are wall-clock seconds on this
machine, the tuned method's with and without training.

    nice -n 10 .venv/bin/python -m benchmarks.task_tuned --index /work/benchcache/pool-index \
        --seeds ../shared/data/multidomain/seeds --domains legal quotes \
        --work .cache/task-tuned --out benchmarks/results/quality
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import tapt
from tapt import Index

# internal: tasks drawn from the seed sets as bench recall draws them
from tapt.bench.labelled_pool import read_seed_sets, seed_subset

# internal: each selection in memory scored against the domain labels (tapt.evaluate reads
#   selection files)
from tapt.retriever.evaluation.metrics import selection_scores
from tapt.retriever.evaluation.oracle import sentence_labels

# internal: the report written as tapt writes its files (temporary name, rename)
from tapt.util.files import atomic_write, write_json_atomic

# internal: the report's version stamps and time, as tapt's own files carry them
from tapt.util.versions import library_versions, utc_now


def _scores(selection: Any, offsets: np.ndarray, relevant: np.ndarray) -> dict[str, Any]:
    rows = np.concatenate([np.arange(offsets[s], offsets[s + 1]) for s in selection.ids]
                          ) if len(selection.ids) else np.empty(0, dtype=np.int64)
    return selection_scores(rows, relevant).to_json()


def tuned_encoder(work: Path, domain: str, steps: int) -> tuple[Path, float, list[str]]:
    """`tapt train` on the task alone: an index of the task's sentences, a selection of all of
    them, and the task mixed 1:1 with it (reused when `work` holds it; the seconds of `tapt
    train` then come from `train_seconds.txt`, written when it was made)."""
    tapt_cli = str(Path(sys.executable).parent / "tapt")
    commands = [
        ["index", "build", "task.txt", "--out", "seed-index", "--no-split", "--device", "cpu"],
        ["select", "random", "seed-index", "--budget", "1.0", "--out", "all-seeds.jsonl"],
        ["train", "--selection", "all-seeds.jsonl", "--task", "task.txt", "--mix", "1:1",
         "--steps", str(steps), "--batch-size", "16", "--max-length", "64", "--seed", "0",
         "--out", "tuned", "--delete-checkpoints"]]
    done = work / "train_seconds.txt"
    if not (work / "tuned" / "config.json").exists() or not done.exists():
        for command, made in zip(commands, ("seed-index", "all-seeds.jsonl", "tuned")):
            t0 = time.perf_counter()         # the last one, `tapt train`, is what is timed
            if not (work / made).exists():
                subprocess.run([tapt_cli, "-q", *command], check=True, cwd=work,
                               env={**os.environ, "HF_HUB_OFFLINE": "1"})
        done.write_text(f"{time.perf_counter() - t0:.1f}\n")
    return (work / "tuned", float(done.read_text().split()[0]),
            [shlex.join(["tapt", *c]) for c in commands])


def run_domain(args: argparse.Namespace, ix: tapt.Index, index: Index, labels: np.ndarray,
               seed_set: Any) -> list[dict[str, Any]]:
    """Plain centroid, fused and tuned centroid on one domain's task; one row each."""
    work = Path(args.work) / seed_set.domain
    work.mkdir(parents=True, exist_ok=True)
    subset = seed_subset(len(seed_set.texts), args.seeds_n, 0)
    task = [seed_set.texts[i] for i in subset]
    (work / "task.txt").write_text("\n".join(task) + "\n", encoding="utf-8")
    relevant = labels == seed_set.domain
    n = int(relevant.sum()) if args.budget == "oracle" else int(args.budget)
    offsets = index.segments(1)
    common = {"task": task, "budget": f"{n}sent", "segment_size": 1, "context": "sentence",
              "device": "cpu"}
    rows = []

    def timed(name: str, method: str, **params: Any) -> Any:
        t0 = time.perf_counter()
        selection = ix.select(method, **common, **params)
        seconds = time.perf_counter() - t0
        rows.append({"domain": seed_set.domain, "seeds": len(task), "method": name,
                     "budget_sentences": n, "seconds": round(seconds, 1),
                     **_scores(selection, offsets, relevant),
                     **{k: v for k, v in selection.info.items()
                        if k in ("reembedded_rows", "reembedded_task", "candidate_segments",
                                 "tuned_seconds", "tuned_load_seconds")}})
        print(json.dumps(rows[-1]), flush=True)
        return selection

    timed("centroid", "centroid")
    timed("fused", "fused")
    model, train_seconds, commands = tuned_encoder(work, seed_set.domain, args.steps)
    timed(f"centroid --tuned-model --candidates {args.candidates}", "centroid",
          tuned_model=str(model), candidates=args.candidates, tuned_device="cpu")
    rows[-1]["train_seconds"] = train_seconds
    rows[-1]["seconds_with_training"] = round(rows[-1]["seconds"] + train_seconds, 1)
    rows[-1]["train_commands"] = commands
    return rows


def write_markdown(path: Path, rows: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    budget = ("the oracle's size (the domain's pool sentences)" if meta["budget"] == "oracle"
              else f"{int(meta['budget']):,} sentences (not the oracle's size: 3x the oracle "
                    "is 47,000-81,000 rows to embed again per domain, hours on this machine; "
                    "recall and F1 are against the whole oracle)")
    lines = ["# Task-tuned cosine beside plain centroid and fused", "",
             "Regenerate (each run keeps the other domains' rows):", "", "```sh",
             *sorted({r.get("command", meta["command"]) for r in rows}), "```", "",
             f"Machine: {meta['machine']}; {meta['date']}. One task per domain: "
             f"{meta['seeds']} seed sentences (repeat 0 of `tapt bench recall`'s subsets); "
             f"budget: {budget}; segment size 1, sentence context. The tuned encoder is "
             "`tapt train` of the index's model (all-MiniLM-L6-v2, a new masked-LM head) on "
             f"the task alone, {meta['steps']} steps of 16 sequences on the CPU (commands "
             "below, run in the domain's work folder); `centroid --tuned-model --candidates "
             f"{meta['candidates']}` embeds that many times the budget again with it, and the "
             "task. Seconds are wall-clock on a shared machine under heavy load (other jobs "
             "on its 2 cores): compare them within a domain only.",
             "", "| domain | method | precision | recall | F1 | seconds | seconds with "
             "training | rows embedded again |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['domain']} | {r['method']} | {r['precision']:.3f} | "
                     f"{r['recall']:.3f} | {r['f1']:.3f} | {r['seconds']} | "
                     f"{r.get('seconds_with_training', '')} | {r.get('reembedded_rows', '')} |")
    train = [r for r in rows if "train_commands" in r]
    if train:
        lines += ["", "Training, per domain (in its work folder, with `task.txt` the task):", "",
                  "```sh", *train[0]["train_commands"], "```"]
    with atomic_write(path) as fh:
        fh.write("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--index", required=True)
    parser.add_argument("--seeds", required=True)
    parser.add_argument("--domains", nargs="+", required=True)
    parser.add_argument("--seeds-n", type=int, default=100)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--budget", default="oracle",
                        help="oracle (the domain's size) or a number of sentences")
    parser.add_argument("--candidates", default="3x")
    parser.add_argument("--work", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    index = Index(args.index)
    ix = tapt.Index.open(args.index)
    labels = sentence_labels(index, "domain", progress=False)
    out = Path(args.out)
    rows: list[dict[str, Any]] = []
    meta = {"command": "nice -n 10 .venv/bin/python -m benchmarks.task_tuned "
                       + shlex.join(sys.argv[1:] if argv is None else argv),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs visible",
            "date": utc_now(), "seeds": args.seeds_n, "steps": args.steps,
            "budget": args.budget, "candidates": args.candidates,
            "versions": library_versions()}
    previous = out / "task_tuned.json"     # rows of other domains, from an earlier run, stay
    if previous.exists():
        rows = [r for r in json.loads(previous.read_text())["rows"]
                if r["domain"] not in args.domains]
    for seed_set in read_seed_sets(Path(args.seeds), args.domains):
        rows += [{**r, "command": meta["command"]}
                 for r in run_domain(args, ix, index, labels, seed_set)]
        write_json_atomic(out / "task_tuned.json", {"meta": meta, "rows": rows})
        write_markdown(out / "task_tuned.md", rows, meta)


if __name__ == "__main__":
    main()
