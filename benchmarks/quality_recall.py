#!/usr/bin/env python
"""Selection quality: the new methods beside `fused` on one labelled pool, same tasks.

For every domain of the pool and every seed count (100 / 500 / 2,000; 3 repeats below 2,000, the
seed subsets of `tapt bench recall`: `labelled_pool.seed_subset`), the task is scored by

  fused            z(classifier) + z(moore-lewis), the equal-weight sum (the baseline)
  fused-learned    classifier, moore-lewis and density with per-task weights (`retriever.learned.fusion`,
                   fitted on held-out task sentences vs a corpus sample; never the labels)
  moore-lewis-x    Moore-Lewis with the task expanded by the classifier's top 0.5 x budget rows
                   (`retriever.learned.few_seeds`); -x1 the same at unigram order
  fused-x          z(classifier) + z(moore-lewis-x)
  fused-learned-x  learned weights over classifier, moore-lewis-x, density
  iforest-fused    Isolation Forest rescoring the top 1.2 x budget of fused (the TADPOLE path);
                   iforest-fused-learned-x the same on fused-learned-x's candidates
  finetune*        Domain-Finetune (`retriever.learned.finetune_classifier`) on the top c x budget of a pre-ranking
                   (only for the tasks given by --finetune; it costs minutes per task on a CPU)
  auto, auto-x     the held-out protocol's choice among the scorers, fused and fused-learned
                   (`retriever.learned.auto_choice`), with plain / expanded Moore-Lewis

and cut at the budgets oracle / 0.5x / 2x at segment sizes 1 and 15. Every finished task is kept
in CACHE/tasks.jsonl, so a run that stops resumes where it was; score arrays go to CACHE/scores.

    nice -n 10 .venv/bin/python -m benchmarks.quality_recall --index .cache/pool-index \
        --seeds /work/shared/data/multidomain/seeds --out benchmarks/results/quality
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from tapt import Index

# internal: bench recall's seed subsets, evaluation and report, for variants bench recall does not
#   run
from tapt.bench import recall_report
from tapt.bench.labelled_pool import read_seed_sets, seed_subset
from tapt.bench.recall import Shared, evaluate_fixed
from tapt.bench.recall_run import seed_embeddings
from tapt.extend import RankingInputs

# internal: each variant scored per sentence against the domain labels
from tapt.retriever.evaluation.metrics import selection_scores
from tapt.retriever.evaluation.oracle import sentence_labels

# internal: the learned scorers' pieces (auto choice, expansion, fine-tuning, fusion weights, AUC)
#   run apart as variants
from tapt.retriever.learned import auto_choice
from tapt.retriever.learned.few_seeds import LexicalConfig, LexicalModel, PoolText, expansion_rows
from tapt.retriever.learned.finetune_classifier import FinetuneConfig, finetune_scores, transplant
from tapt.retriever.learned.fusion import fuse, weights_from
from tapt.retriever.learned.heldout import auc

# internal: iforest on prepared inputs, and a variant's score array ranked as a method ranks
from tapt.retriever.methods import by_sentence_scores, get_method

# internal: the learned fusion fitted on one task's data, a variant
from tapt.retriever.methods.learned_scorers import TaskData, learned_fusion

# internal: the oracle budget as the methods take it
from tapt.retriever.ranking.budget import parse_budget

# internal: the variants' score arrays fused and z-scored directly
from tapt.retriever.scoring import arrays

# internal: the report written as tapt writes its files (temporary name, rename)
from tapt.util.files import atomic_write, write_json_atomic

# internal: the report's version stamps and time, as tapt's own files carry them
from tapt.util.versions import library_versions, utc_now

log = logging.getLogger("quality_recall")

BUDGETS = (("oracle", 1.0), ("0.5x", 0.5), ("2x", 2.0))
PR_METHODS = ("classifier", "moore-lewis", "moore-lewis-x", "fused", "fused-x", "fused-learned",
              "fused-learned-x", "auto-x", "finetune", "finetune+fused")
SIZES = (1, 15)


def task_key(domain: str, seeds: int, repeat: int) -> str:
    return f"{domain}-{seeds}-{repeat}"


class Run:
    """Index, labels, pool text and seeds shared by every task, plus the resumable task log."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.index = Index(args.index)
        self.labels = sentence_labels(self.index, "domain", progress=True)
        self.shared = Shared(index=self.index, labels=self.labels)
        self.seed_sets = read_seed_sets(args.seeds, args.domains)
        args.cache.mkdir(parents=True, exist_ok=True)
        (args.cache / "scores").mkdir(exist_ok=True)
        self.embeddings = seed_embeddings(self.index, self.seed_sets, args.cache)
        self._pool: PoolText | None = None
        self.done: dict[str, dict] = {}
        self.reload()

    def reload(self) -> None:
        """Read every stage's task log (one per stage, so two processes may run side by side)."""
        for path in sorted(self.args.cache.glob("tasks-*.jsonl")):
            for line in path.read_text().splitlines():
                if line.strip():
                    rec = json.loads(line)
                    self.done.setdefault(rec["key"], {}).update(rec)

    @property
    def pool(self) -> PoolText:
        if self._pool is None:
            t0 = time.perf_counter()
            self._pool = PoolText.of_index(self.index)
            log.info("stored lexical ids checked in %.1fs", time.perf_counter() - t0)
        return self._pool

    def record(self, stage: str, rec: dict) -> None:
        with open(self.args.cache / f"tasks-{stage}.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps(rec) + "\n")
        self.done.setdefault(rec["key"], {}).update(rec)

    def tasks(self) -> list[tuple[Any, int, int]]:
        """Every (seed set, size, repeat): first repeats, largest and smallest sizes first."""
        jobs = []
        for s in self.seed_sets:
            for size in self.args.sizes:
                for rep in range(1 if size >= len(s.texts) else self.args.repeats):
                    jobs.append((s, size, rep))
        first = [max(self.args.sizes), min(self.args.sizes)]
        return sorted(jobs, key=lambda j: (j[2], j[1] not in first, -j[1], j[0].domain))


def evaluate(run: Run, name: str, scores: np.ndarray, relevant: np.ndarray,
             budgets: dict[str, int], seconds: float) -> tuple[list[dict], dict]:
    rows, curve = evaluate_fixed(scores, run.shared, relevant, budgets, list(SIZES))
    return [{"method": name, "seconds": round(seconds, 2), **r} for r in rows], curve


class _Scores:
    """A pre-ranking already computed (`Method.full_ranking` of fixed sentence scores)."""

    def __init__(self, scores: np.ndarray) -> None:
        self.scores = scores

    def shared_params(self, params: Any) -> Any:
        return params

    def full_ranking(self, ctx: RankingInputs, params: Any):
        return by_sentence_scores(ctx.view, self.scores, None, {}, threshold=-np.inf)


def iforest_on(run: Run, emb: np.ndarray, scores: np.ndarray, n: int, seed: int):
    """`tapt select iforest --candidates 1.2x --detector iforest` on candidates pre-ranked by
    `scores` (segment size 1), the same as `--prerank fused` when `scores` are fused's."""
    method = get_method("iforest")
    params = method.make_params({"candidates": "1.2x", "detector": "iforest"}, explicit=())
    ctx = RankingInputs(run.index, run.shared.view(1), parse_budget(f"{n}sent"), seed, emb)
    adapter = type("Pre", (type(method),), {"_prerank": lambda self, p: _Scores(scores)})()
    return adapter.rank(ctx, params)


def base_task(run: Run, s, size: int, rep: int) -> dict:
    """Every method that needs no fine-tuning, on one task."""
    relevant = run.labels == s.domain
    n = int(relevant.sum())
    budgets = {b: max(1, int(round(f * n))) for b, f in BUDGETS}
    subset = seed_subset(len(s.texts), size, rep)
    emb = run.embeddings[s.domain][subset]
    texts = [s.texts[i] for i in subset]
    rows: list[dict] = []
    curves: dict[str, dict] = {}
    info: dict[str, Any] = {}
    arrays: dict[str, np.ndarray] = {}
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    data = TaskData(run.index, run.pool, emb, texts, n_positive=n, seed=rep,
                    lexical=LexicalConfig(fraction=0.5))
    lf = learned_fusion(data, inputs=("classifier", "moore-lewis", "density"),
                        also=("moore-lewis-plain", "distance", "centroid"))
    seconds["fused-learned-x"] = time.perf_counter() - t0
    arrays["fused-learned-x"] = lf.scores
    info["fused-learned-x"] = lf.weights.to_json()
    arrays["moore-lewis-x"] = lf.parts["moore-lewis"]
    arrays["moore-lewis"] = lf.parts["moore-lewis-plain"]
    plain_inputs = ["classifier", "moore-lewis-plain", "density"]
    plain = weights_from(lf.features, plain_inputs, rep)
    arrays["fused-learned"] = fuse({k: lf.parts[k] for k in plain_inputs}, plain.weights)
    info["fused-learned"] = plain.to_json()
    f = lf.features
    for suffix, lexical in (("", "moore-lewis-plain"), ("-x", "moore-lewis")):
        names = [nm for nm in f.names if nm != ({"": "moore-lewis",
                                                 "-x": "moore-lewis-plain"}[suffix])]
        cols = f.columns(names)
        names = ["moore-lewis" if nm == lexical else nm for nm in names]
        choice = auto_choice.choose(cols, f.is_task, f.fold_of, names, seed=rep)
        info["auto" + suffix] = choice.to_json()
    for name in ("classifier", "density", "distance", "centroid"):
        arrays[name] = lf.parts[name]
    t0 = time.perf_counter()
    extra = expansion_rows(arrays["classifier"], n, 0.5)
    arrays["moore-lewis-x1"] = LexicalModel(run.pool, texts, extra, rep, 1).score_rows()
    seconds["moore-lewis-x1"] = time.perf_counter() - t0
    arrays["fused"] = arrays.fuse_zscores(arrays["classifier"], arrays["moore-lewis"])
    arrays["fused-x"] = arrays.fuse_zscores(arrays["classifier"], arrays["moore-lewis-x"])
    for suffix in ("", "-x"):
        chosen = info["auto" + suffix]["chosen"]
        key = chosen + suffix if chosen in ("fused", "fused-learned", "moore-lewis") else chosen
        arrays["auto" + suffix] = arrays[key]
    for name in arrays:
        seconds.setdefault(name, 0.0)
    for name, values in arrays.items():
        got, curves[name] = evaluate(run, name, values, relevant, budgets, seconds[name])
        rows += got
    for name, pre in (("iforest-fused", "fused"), ("iforest-fused-learned-x", "fused-learned-x")):
        for b, nb in budgets.items():
            t0 = time.perf_counter()
            ranking = iforest_on(run, emb, arrays[pre], nb, rep)
            rows.append({"method": name, "segment_size": 1, "budget": b, "budget_sentences": nb,
                         "seconds": round(seconds[pre] + time.perf_counter() - t0, 2),
                         **selection_scores(ranking.segments, relevant).to_json()})
    np.savez(run.args.cache / "scores" / f"{task_key(s.domain, len(subset), rep)}.npz",
             **{k.replace("-", "_"): v.astype(np.float32) for k, v in arrays.items()})
    return {"rows": rows, "curves": curves, "info": info}


def finetune_task(run: Run, s, size: int, rep: int, prerank_name: str) -> dict:
    """Domain-Finetune on the top 1.5 x budget of `prerank_name` (from the base stage's scores):
    alone, and its log-odds z-summed with the pre-ranking's within the candidates."""
    relevant = run.labels == s.domain
    n = int(relevant.sum())
    budgets = {b: max(1, int(round(f * n))) for b, f in BUDGETS}
    subset = seed_subset(len(s.texts), size, rep)
    texts = [s.texts[i] for i in subset]
    saved = np.load(run.args.cache / "scores" / f"{task_key(s.domain, len(subset), rep)}.npz")
    prerank = saved[prerank_name.replace("-", "_")].astype(np.float64)
    config = FinetuneConfig(seed=rep, candidates=run.args.finetune_candidates)
    t0 = time.perf_counter()
    result = finetune_scores(run.index, texts, prerank, n, config, progress=False)
    seconds = time.perf_counter() - t0
    both = arrays.zscore(result.candidate_scores) + arrays.zscore(prerank[result.candidates])
    scored = {"finetune": result.scores,
              "finetune+fused": transplant(prerank, result.candidates, both)}
    rows, curves = [], {}
    for name, values in scored.items():
        got, curves[name] = evaluate(run, name, values, relevant, budgets, seconds)
        rows += got
    in_cands = relevant[result.candidates]
    info = {**result.info, "prerank": prerank_name, "candidate_recall":
            round(float(in_cands.sum() / max(1, n)), 4),
            "candidate_auc": round(float(auc(result.candidate_scores, in_cands)), 4),
            "prerank_candidate_auc": round(float(auc(prerank[result.candidates], in_cands)), 4)}
    return {"rows": rows, "curves": curves, "info": info}


GOALS = (  # (seeds, segment size, mean precision at the oracle budget) aimed for
    (2000, 1, 0.93), (2000, 15, 0.97), (100, 1, 0.87), (100, 15, 0.94))


def goals_markdown(agg: list[dict]) -> str:
    """Issue 14's goals, met or missed, for every method (mean precision at the oracle budget)."""
    cell = {(r["method"], r["seeds"], r["segment_size"], r["domain"]): r for r in agg
            if r["budget"] == "oracle"}
    methods = sorted({r["method"] for r in agg})
    head = [f"{n} seeds, size {z}: >= {g}" for n, z, g in GOALS] + [
        "2000 seeds: worst domain >= 0.80"]
    lines = ["## Goals: mean precision at the oracle budget", "",
             "| method | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
    for m in methods:
        cells = []
        for n, z, g in GOALS:
            r = cell.get((m, n, z, "all"))
            cells.append("-" if r is None else
                         f"{r['precision']:.3f} {'met' if r['precision'] >= g else 'missed'}")
        worst = [r for (mm, n, z, d), r in cell.items() if mm == m and n == 2000 and z == 1
                 and d != "all"]
        if worst:
            w = min(worst, key=lambda r: r["precision"])
            cells.append(f"{w['domain']} {w['precision']:.3f} "
                         f"{'met' if w['precision'] >= 0.80 else 'missed'}")
        else:
            cells.append("-")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def partial_markdown(partial: list[dict], agg: list[dict]) -> str:
    """Methods run on some domains only (Domain-Finetune): per task, beside fused."""
    if not partial:
        return ""
    cell = {(r["method"], r["seeds"], r["segment_size"], r["domain"], r["budget"]): r
            for r in agg + partial}
    lines = ["", "### Methods run on some tasks only: precision at the oracle budget (repeat 0)",
             "", "| method | seeds | domain | size 1 | size 15 | fused, size 1 | fused, size 15 |",
             "|---|---|---|---|---|---|---|"]
    keys = sorted({(r["method"], r["seeds"], r["domain"]) for r in partial
                   if r["domain"] != "all"})
    for m, n, d in keys:
        vals = [cell.get((mm, n, z, d, "oracle")) for mm in (m, "fused") for z in (1, 15)]
        lines.append(f"| {m} | {n} | {d} | " + " | ".join(
            f"{v['precision']:.3f}" if v else "-" for v in vals) + " |")
    return "\n".join(lines) + "\n"


def report(run: Run) -> None:
    """recall.json, recall.md and PR curves from every finished task."""
    results, curves, info = [], {}, {}
    for s, size, rep in run.tasks():
        key = task_key(s.domain, min(size, len(s.texts)), rep)
        rec = run.done.get(key)
        if not rec:
            continue
        for part in ("base", "finetune", "auto"):
            for r in rec.get(part, {}).get("rows", []):
                results.append({**r, "domain": s.domain, "seeds": min(size, len(s.texts)),
                                "repeat": rep})
            if rep == 0 and size == max(run.args.sizes):
                curves.setdefault(s.domain, {}).update(rec.get(part, {}).get("curves", {}))
        info[key] = {p: rec.get(p, {}).get("info") for p in ("base", "finetune", "auto")}
    agg = recall_report.aggregate(results)
    n_domains = len(run.seed_sets)
    domains_of: dict[tuple, set] = {}
    for r in agg:
        if r["domain"] != "all":
            domains_of.setdefault((r["method"], r["seeds"], r["segment_size"]), set()).add(
                r["domain"])
    # a mean over some domains only is not comparable: such methods get their own table
    complete = {k for k, v in domains_of.items() if len(v) == n_domains}
    partial = [r for r in agg if (r["method"], r["seeds"], r["segment_size"]) not in complete]
    agg = [r for r in agg if (r["method"], r["seeds"], r["segment_size"]) in complete]
    out = run.args.out
    out.mkdir(parents=True, exist_ok=True)
    oracle = {s.domain: int((run.labels == s.domain).sum()) for s in run.seed_sets}
    write_json_atomic(out / "recall.json", {
        "created": utc_now(), "index_uuid": run.index.uuid,
        "index_counts": run.index.manifest["counts"], "model": run.index.manifest["model"]["name"],
        "command": " ".join(shlex.quote(a) for a in sys.argv), "machine": {
            "cpus": __import__("os").cpu_count(), "platform": platform.platform()},
        "oracle_sentences": oracle, "versions": library_versions(), "aggregate": agg,
        "task_info": info, "pr_curves": curves})  # per-task rows: CACHE/tasks-*.jsonl
    md = recall_report.markdown(agg, [b for b, _ in BUDGETS]) + partial_markdown(partial, agg)
    with atomic_write(out / "recall.md", "w") as fh:
        fh.write("# Selection quality: new methods beside fused (`benchmarks/quality_recall.py`)\n\n"
                 f"Regenerate: `{run.args.regenerate}`\n\n" + goals_markdown(agg) + "\n"
                 + md + "\n")
    shown = {d: {m: c for m, c in cs.items() if m in PR_METHODS} for d, cs in curves.items()}
    recall_report.plot_pr_curves(shown, out, oracle)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--index", type=Path, required=True)
    p.add_argument("--seeds", type=Path, required=True)
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/quality"))
    p.add_argument("--cache", type=Path, default=Path(".cache/quality"))
    p.add_argument("--sizes", type=int, nargs="+", default=[100, 500, 2000])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--domains", nargs="*")
    p.add_argument("--report-only", action="store_true")
    p.add_argument("--stages", nargs="+", default=["base", "finetune"],
                   help="base and/or finetune (two processes may run one stage each)")
    p.add_argument("--finetune", nargs="*", default=[], metavar="SEEDS[:REPEAT]",
                   help="also run Domain-Finetune on these tasks (e.g. 2000 100:0)")
    p.add_argument("--finetune-candidates", default="1.5x")
    p.add_argument("--finetune-domains", nargs="*",
                   help="fine-tune only these domains, in this order (default: all, sorted)")
    p.add_argument("--prerank", default="fused")
    args = p.parse_args(argv)
    given = list(sys.argv[1:] if argv is None else argv)
    for flag, values in (("--report-only", 0), ("--stages", len(args.stages))):
        if flag in given:  # the command that makes everything, not this partial step
            at = given.index(flag)
            del given[at:at + 1 + values]
    args.regenerate = "nice -n 10 .venv/bin/python -m benchmarks.quality_recall " + " ".join(
        shlex.quote(a) for a in given)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("tapt").setLevel(logging.WARNING)
    run = Run(args)
    if not args.report_only and "base" in args.stages:
        for s, size, rep in tqdm(run.tasks(), desc="tasks"):
            key = task_key(s.domain, min(size, len(s.texts)), rep)
            if "base" in run.done.get(key, {}):
                continue
            t0 = time.perf_counter()
            result = base_task(run, s, size, rep)
            run.record("base", {"key": key, "base": result})
            got = {r["method"]: r["precision"] for r in result["rows"]
                   if r["budget"] == "oracle" and r["segment_size"] == 1}
            log.info("%s (%.0fs): %s", key, time.perf_counter() - t0,
                     ", ".join(f"{k} {v:.3f}" for k, v in sorted(got.items())))
    wanted = [tuple(int(v) for v in spec.split(":")) for spec in args.finetune]
    if args.report_only or "finetune" not in args.stages:
        wanted = []
    order = args.finetune_domains or sorted(s.domain for s in run.seed_sets)
    jobs = sorted((j for j in run.tasks() if j[0].domain in order),
                  key=lambda j: (j[2], order.index(j[0].domain)))
    for s, size, rep in jobs:
        if not any(w[0] == size and (len(w) == 1 or w[1] == rep) for w in wanted):
            continue
        key = task_key(s.domain, min(size, len(s.texts)), rep)
        while "base" not in run.done.get(key, {}):  # the base stage may run in another process
            time.sleep(30)
            run.reload()
        if "finetune" in run.done.get(key, {}):
            continue
        t0 = time.perf_counter()
        result = finetune_task(run, s, size, rep, args.prerank)
        run.record("finetune", {"key": key, "finetune": result})
        got = {r["method"]: r["precision"] for r in result["rows"]
               if r["budget"] == "oracle" and r["segment_size"] == 1}
        log.info("%s finetune (%.0fs): %s %s", key, time.perf_counter() - t0, got,
                 {k: v for k, v in result["info"].items() if "seconds" in k or "auc" in k})
    report(run)


if __name__ == "__main__":
    main()
