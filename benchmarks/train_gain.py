#!/usr/bin/env python
"""Does selected data make continued pretraining better? TADPOLE's central claim at CPU scale.

One base model (the packaged all-MiniLM-L6-v2, whose masked-LM head is new, first warmed for
--warm-steps on random pool text and saved once) is trained for the same number of steps on each of

  random     random pool segments (`tapt select random`)          } same sentence budget:
  tapt       the task's own seed text only (TAPT)                  } the domain's true pool size
  centroid   `tapt select centroid`                                } times --budget-frac
  knn        `tapt select knn`                                     }
  iforest    `tapt select iforest` (discrete)                      }
  iforest-w  `tapt select iforest --weights continuous`, trained with `--weights sample`
  oracle     the domain's true pool text

and scored by masked-LM loss on held-out text of the domain, with the same masks for every model
(`tapt eval-mlm --seed`). Held-out text: each domain's seed file is split BY DOCUMENT (fixed seed
12345, independent of the run seeds) into a task half, used for selection and for TAPT, and an eval
half, used only for scoring (capped at --eval-sentences, whole documents). Seed documents never occur in
the pool, so no condition trains on the held-out text.

Usage (build the index once, then run; every step is resumable and skipped when already done):

  tapt index build ../shared/data/multidomain/pool.jsonl.gz --out .cache/pool-index --no-split
  python benchmarks/train_gain.py --index .cache/pool-index --data ../shared/data/multidomain \\
      --domains medical legal --seeds 0 1 2 --steps 300 --batch-size 16 --max-length 128

Writes RESULTS/NAME.json (every run, summaries, versions) and RESULTS/NAME.md (table + the exact
commands). Runs go to --work (models are deleted after scoring unless --keep-models).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import math
import os
import platform
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# internal: selection files built from the corpus's own chunks, not from an index, for tapt train
from tapt.retriever.selections.file_format import SelectedSegment, read_manifest, write_selection  # noqa: E402

CONDITIONS = ("random", "tapt", "centroid", "knn", "iforest", "iforest-w", "oracle")
SPLIT_SEED = 12345
COMMANDS: list[str] = []


def run(cmd: list[str], capture: bool = False) -> str:
    """Run a command (recorded for the report); stop the benchmark on failure."""
    COMMANDS.append(shlex.join(cmd))
    print("+", shlex.join(cmd), file=sys.stderr, flush=True)
    done = subprocess.run(cmd, check=False, text=True, stdout=subprocess.PIPE if capture else None)
    if done.returncode != 0:
        raise SystemExit(f"command failed ({done.returncode}): {shlex.join(cmd)}")
    return done.stdout or ""


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    return path


def documents(records: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Consecutive records with the same `doc` form one document."""
    docs: list[list[dict[str, Any]]] = []
    for r in records:
        if docs and docs[-1][0].get("doc") == r.get("doc"):
            docs[-1].append(r)
        else:
            docs.append([r])
    return docs


def cut_segments(records: list[dict[str, Any]], size: int, method: str) -> list[SelectedSegment]:
    """Segments of <= `size` consecutive sentences of one document (rows = record numbers)."""
    segments: list[SelectedSegment] = []
    row = 0
    for d, doc in enumerate(documents(records)):
        for start in range(0, len(doc), size):
            chunk = [r["text"] for r in doc[start : start + size]]
            segments.append(SelectedSegment(
                id=len(segments), rank=len(segments), score=0.0, weight=1.0, method=method, doc=d,
                rows=(row + start, row + start + len(chunk)), text=" ".join(chunk), sentences=chunk))
        row += len(doc)
    return segments


def write_built_selection(path: Path, segments: list[SelectedSegment], method: str,
                          params: dict[str, Any]) -> Path:
    """A selection file built by this script (not from the index: `index` is null)."""
    ranked = [SelectedSegment(i, i, s.score, s.weight, method, s.doc, s.rows, s.text, s.sentences)
              for i, s in enumerate(segments)]
    write_selection(path, ranked, {
        "method": method, "params": params, "index": None, "task": None,
        "counts": {"segments": len(ranked), "sentences": sum(len(s.sentences) for s in ranked)},
        "segment_size": params.get("segment_size"),
    })
    return path


def split_seeds(seed_file: Path, work: Path, eval_sentences: int) -> tuple[Path, Path, list]:
    """Task half and held-out half of a seed file, split by document with a fixed seed."""
    docs = documents(read_jsonl(seed_file))
    order = list(range(len(docs)))
    random.Random(SPLIT_SEED).shuffle(order)
    task_docs = sorted(order[: len(order) // 2])
    eval_docs = sorted(order[len(order) // 2 :])
    task = [r for i in task_docs for r in docs[i]]
    held: list[dict[str, Any]] = []
    for i in eval_docs:
        if held and len(held) + len(docs[i]) > eval_sentences:
            break
        held.extend(docs[i])
    keep = ("text", "doc", "pos")
    return (write_jsonl(work / "task.jsonl", [{k: r[k] for k in keep if k in r} for r in task]),
            write_jsonl(work / "heldout.jsonl", [{k: r[k] for k in keep if k in r} for r in held]),
            task)


def eval_mlm(args: argparse.Namespace, model: str | None, heldout: Path) -> dict[str, Any]:
    cmd = [args.tapt, "-q", "eval-mlm", "--text", str(heldout), "--max-length", str(args.max_length),
           "--batch-size", str(args.eval_batch_size), "--seed", str(args.eval_seed),
           "--device", args.device, "--json"]
    if model:
        cmd[3:3] = ["--model", model]
    return json.loads(run(cmd, capture=True).strip().splitlines()[-1])


def train(args: argparse.Namespace, model: str | None, selection: Path, out: Path, seed: int,
          steps: int, weights: str = "discrete") -> dict[str, Any]:
    cmd = [args.tapt, "-q", "train", "--selection", str(selection), "--steps", str(steps),
           "--batch-size", str(args.batch_size), "--max-length", str(args.max_length),
           "--lr", str(args.lr), "--warmup", str(args.warmup), "--seed", str(seed),
           "--weights", weights, "--device", args.device, "--out", str(out),
           "--save-every", str(args.save_every), "--resume", "--delete-checkpoints"]
    if model:
        cmd[3:3] = ["--model", model]
    run(cmd)
    return json.loads((out / "training_manifest.json").read_text(encoding="utf-8"))


def select(args: argparse.Namespace, method: str, out: Path, task: Path | None, budget: int,
           seed: int, extra: list[str] = ()) -> Path:
    if out.exists() and out.with_name(out.name + ".manifest.json").exists():
        return out
    cmd = [args.tapt, "-q", "select", method, str(args.index), "--out", str(out),
           "--budget", f"{budget}sent", "--seed", str(seed), *extra]
    if task is not None:
        cmd += ["--task", str(task)]
    run(cmd)
    return out


def selection_counts(path: Path) -> dict[str, int]:
    counts = read_manifest(path).get("counts") or {}
    return {"segments": counts.get("segments"), "sentences": counts.get("sentences")}


def run_tag(args: argparse.Namespace) -> str:
    """Settings that decide a run's result: runs scored with equal settings are reused."""
    keys = ("index", "model", "warm_steps", "warm_sentences", "steps", "batch_size", "max_length",
            "lr", "warmup", "budget_frac", "segment_size", "k", "eval_sentences", "eval_seed")
    blob = json.dumps({k: str(getattr(args, k)) for k in keys}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def summarise(runs: list[dict[str, Any]], base: dict[str, Any]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for domain in sorted({r["domain"] for r in runs}):
        rows: dict[str, Any] = {}
        for cond in CONDITIONS:
            losses = [r["eval"]["loss"] for r in runs if r["domain"] == domain and r["condition"] == cond]
            if not losses:
                continue
            rows[cond] = {"loss_mean": statistics.fmean(losses),
                          "loss_std": statistics.stdev(losses) if len(losses) > 1 else 0.0,
                          "n": len(losses)}
        for row in rows.values():
            row["gain_vs_base"] = base[domain]["loss"] - row["loss_mean"]
            if "random" in rows:
                row["gain_vs_random"] = rows["random"]["loss_mean"] - row["loss_mean"]
        summary[domain] = {"base_loss": base[domain]["loss"], "conditions": rows}
    return summary


def portable(command: str, result: dict[str, Any]) -> str:
    """A recorded command as a reader types it: the repository's paths relative to it, its
    virtualenv's `python` and `tapt` by name."""
    root = str(Path(result["arguments"]["results"]).parent.parent)
    return command.replace(f"{root}/.venv/bin/", "").replace(f"{root}/", "")


def write_markdown(path: Path, result: dict[str, Any]) -> None:
    a = result["arguments"]
    lines = [
        "# Continued pretraining gain by data selection (`benchmarks/train_gain.py`)", "",
        f"Base model: {a['model'] or 'packaged all-MiniLM-L6-v2'}, MLM head warmed {a['warm_steps']} "
        f"steps on random pool text. Every condition: {a['steps']} steps, batch {a['batch_size']}, "
        f"max length {a['max_length']}, lr {a['lr']}, seeds {a['seeds']}. Budget: "
        f"{a['budget_frac']} x the domain's true pool sentences. Score: masked-LM loss (nats/token, "
        f"lower is better) on held-out seed documents, identical masks for every model "
        f"(eval seed {a['eval_seed']}).", "",
        "| domain | condition | sentences | runs | eval loss (mean ± sd) | perplexity | gain vs base | gain vs random |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    sizes = {(r["domain"], r["condition"]): r["selection"]["sentences"] for r in result["runs"]}
    for domain, s in result["summary"].items():
        lines.append(f"| {domain} | base | - | 1 | {s['base_loss']:.4f} | "
                     f"{result['base'][domain]['perplexity']:.2f} | - | - |")
        for cond, row in s["conditions"].items():
            lines.append(
                f"| {domain} | {cond} | {sizes.get((domain, cond)) or '-'} | {row['n']} | "
                f"{row['loss_mean']:.4f} ± {row['loss_std']:.4f} | {math.exp(row['loss_mean']):.2f} | "
                f"{row['gain_vs_base']:+.4f} | {row.get('gain_vs_random', float('nan')):+.4f} |")
    lines += ["", f"Total time {result['seconds']:.0f} s on {result['machine']}.", "",
              "Held-out split: seed documents shuffled with seed 12345, first half = task "
              "(selection, TAPT), second half = evaluation (whole documents).", "",
              "## Commands", "", "```",
              portable(" ".join(shlex.quote(x) for x in result["invocation"]), result)]
    lines += [portable(c, result) for c in result["commands"]] + ["```", ""]
    path.write_text("\n".join(lines), encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", type=Path, help="index of DATA/pool.jsonl.gz (--no-split); required")
    p.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data" / "multidomain")
    p.add_argument("--domains", nargs="+", default=["medical", "legal"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--conditions", nargs="+", default=list(CONDITIONS), choices=CONDITIONS)
    p.add_argument("--model", default=None, help="masked-LM to start from [packaged MiniLM]")
    p.add_argument("--warm-steps", type=int, default=200, help="MLM-head warm-up steps (0 = none)")
    p.add_argument("--warm-sentences", type=int, default=20000)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--eval-batch-size", type=int, default=32)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--warmup", type=float, default=0.06)
    p.add_argument("--save-every", type=int, default=500)
    p.add_argument("--budget-frac", type=float, default=1.0)
    p.add_argument("--segment-size", type=int, default=None, help="[the index's]")
    p.add_argument("--k", type=int, default=50, help="neighbours per task sentence for knn")
    p.add_argument("--eval-sentences", type=int, default=1000)
    p.add_argument("--eval-seed", type=int, default=0)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--work", type=Path, default=REPO / ".cache" / "train_gain")
    p.add_argument("--results", type=Path, default=REPO / "benchmarks" / "results")
    p.add_argument("--name", default="train_gain")
    p.add_argument("--keep-models", action="store_true")
    p.add_argument("--report-only", action="store_true",
                   help="train nothing: report the runs an earlier invocation has scored")
    p.add_argument("--tapt", default=str(Path(sys.executable).with_name("tapt")),
                   help="the tapt executable")
    p.add_argument("--markdown-only", action="store_true",
                   help="measure nothing: rewrite RESULTS/NAME.md from RESULTS/NAME.json")
    args = p.parse_args(argv)
    if args.markdown_only:
        result = json.loads((args.results / f"{args.name}.json").read_text(encoding="utf-8"))
        write_markdown(args.results / f"{args.name}.md", result)
        return
    if args.index is None:
        p.error("--index is required")
    started = time.time()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args.work.mkdir(parents=True, exist_ok=True)
    index_manifest = json.loads((args.index / "manifest.json").read_text(encoding="utf-8"))
    seg_size = args.segment_size or int(index_manifest["segment_size"])
    pool = read_jsonl(args.data / "pool.jsonl.gz")

    # 1. the base model: the start model with its MLM head warmed on random pool text
    base_model = args.model
    if args.warm_steps > 0:
        warm_sel = select(args, "random", args.work / f"warm-{args.warm_sentences}.jsonl", None, args.warm_sentences, 10_000)
        base_dir = args.work / "base"
        train(args, args.model, warm_sel, base_dir, seed=0, steps=args.warm_steps)
        base_model = str(base_dir)

    runs: list[dict[str, Any]] = []
    base_eval: dict[str, Any] = {}
    for domain in args.domains:
        dwork = args.work / domain
        task, heldout, task_records = split_seeds(args.data / "seeds" / f"{domain}.jsonl.gz", dwork,
                                                  args.eval_sentences)
        budget = max(1, round(args.budget_frac * sum(r["domain"] == domain for r in pool)))
        base_eval[domain] = eval_mlm(args, base_model, heldout)
        tapt_sel = write_built_selection(dwork / "sel-tapt.jsonl", cut_segments(task_records, seg_size,
                                         "tapt"), "tapt", {"segment_size": seg_size, "source": str(task)})
        oracle_all = cut_segments([r for r in pool if r["domain"] == domain], seg_size, "oracle")
        for seed in args.seeds:
            sels: dict[str, tuple[Path, str]] = {"tapt": (tapt_sel, "discrete")}
            if "random" in args.conditions:
                sels["random"] = (select(args, "random", dwork / f"sel-random-{budget}-{seed}.jsonl", None,
                                         budget, seed), "discrete")
            if "centroid" in args.conditions:
                sels["centroid"] = (select(args, "centroid", dwork / f"sel-centroid-{budget}.jsonl", task,
                                           budget, 0), "discrete")
            if "knn" in args.conditions:
                sels["knn"] = (select(args, "knn", dwork / f"sel-knn-{budget}-k{args.k}.jsonl", task, budget, 0,
                                      ["--k", str(args.k)]), "discrete")
            if "iforest" in args.conditions:
                sels["iforest"] = (select(args, "iforest", dwork / f"sel-iforest-{budget}-{seed}.jsonl", task,
                                          budget, seed), "discrete")
            if "iforest-w" in args.conditions:
                sels["iforest-w"] = (select(args, "iforest", dwork / f"sel-iforest-w-{budget}-{seed}.jsonl", task,
                                            budget, seed, ["--weights", "continuous"]), "sample")
            if "oracle" in args.conditions:
                pick = oracle_all
                if args.budget_frac < 1.0:  # a seeded subset of the domain's segments
                    rng = random.Random(seed)
                    pick, total = [], 0
                    for s in rng.sample(oracle_all, len(oracle_all)):
                        if total >= budget:
                            break
                        pick.append(s)
                        total += len(s.sentences)
                sels["oracle"] = (write_built_selection(dwork / f"sel-oracle-{seed}.jsonl", pick, "oracle",
                                                        {"segment_size": seg_size, "seed": seed}), "discrete")
            for cond in args.conditions:
                sel, weights = sels[cond]
                out = dwork / "runs" / f"{cond}-seed{seed}"
                done = dwork / f"results-{run_tag(args)}" / f"{cond}-seed{seed}.json"
                if done.is_file():  # scored by an earlier invocation with the same settings
                    runs.append(json.loads(done.read_text(encoding="utf-8")))
                    continue
                if args.report_only:
                    continue
                manifest = train(args, base_model, sel, out, seed, args.steps, weights)
                score = eval_mlm(args, str(out), heldout)
                runs.append({"domain": domain, "condition": cond, "seed": seed, "weights": weights,
                             "selection": {"path": str(sel), **selection_counts(sel)},
                             "train_loss": manifest["train_loss"], "train_seconds": manifest["seconds"],
                             "eval": {k: score[k] for k in ("loss", "perplexity", "tokens", "examples")}})
                done.parent.mkdir(parents=True, exist_ok=True)
                done.write_text(json.dumps(runs[-1]) + "\n", encoding="utf-8")
                if not args.keep_models:
                    shutil.rmtree(out, ignore_errors=True)

    result = {
        "arguments": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "invocation": [sys.executable, *sys.argv],
        "index": {"path": str(args.index), "uuid": index_manifest.get("uuid"), "segment_size": seg_size},
        "base": base_eval,
        "runs": runs,
        "summary": summarise(runs, base_eval),
        "commands": COMMANDS,
        "seconds": round(time.time() - started, 1),
        "machine": f"{platform.machine()} {os.cpu_count()} cpus, device {args.device}",
        "versions": {"python": platform.python_version()} | _versions(),
    }
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / f"{args.name}.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    write_markdown(args.results / f"{args.name}.md", result)
    print(f"wrote {args.results / (args.name + '.json')} and .md", file=sys.stderr)


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for name in ("torch", "transformers", "numpy", "faiss-cpu", "scikit-learn", "tapt"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


if __name__ == "__main__":
    main()
