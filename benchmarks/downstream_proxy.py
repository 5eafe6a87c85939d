"""Does a selection make a better task model than random data at equal compute? The downstream
benchmark on three labelled tasks of the multi-domain corpus, through `tapt.bench_downstream`.

For each task (quotes: fortune files; it: manual sections; religion: parts of the Bible; made
from the corpus's seed files by `benchmarks/downstream_tasks.py`, held out from the pool by
document) every condition continues the same general model of the pool (`tapt pretrain` at
`--preset`, made once and cached) with the same steps, batch, length and learning rate; every
labelled example is tested once per seed by 5-fold cross-validation over documents. Writes:

- `OUT/proxy.json`: one record per task and condition (`task`, `condition`, `delta_vs_random`,
  `ci_low`, `ci_high`: accuracy and the 95% interval of its difference from `random`; for
  methods `oracle_share` and `share_ci_low`), the settings, the general model, stage seconds
  per task, the machine's load;
- `OUT/proxy.md`: the tables of every task; `OUT/proxy-summary.md`: one table over the tasks,
  the goal, the time and the machine's load;
- `OUT/proxy-gains.png`: every condition's gain over random with its interval, per task.

    python -m benchmarks.downstream_proxy --index .cache/pool-index \\
        --seeds ../shared/data/multidomain/seeds --work .cache/downstream \\
        --out benchmarks/results/downstream
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import tapt
from benchmarks.downstream_tasks import CLASSES, DEFAULT_SEEDS, TASKS, make_task

# internal: bench downstream's conditions, the default of --conditions
from tapt.bench.downstream_config import CONDITIONS

DOMAIN = {"quotes": "quotes", "it": "it", "religion": "religion"}


def _load() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def _write_labelled(task: str, seeds: Path, path: Path) -> Path:
    rows = make_task(task, seeds, CLASSES[task], 8)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                       encoding="utf-8")
        tmp.rename(path)
    return path


def _goal(reports: list[dict]) -> dict:
    """The issue's goal read off the reports: oracle resolved on >= 2 of 3 tasks, fused >= 80%
    of its gain where it is."""
    resolved, fused = [], []
    for report in reports:
        rows = {r["condition"]: r for r in report["aggregate"]}
        oracle = rows.get("oracle", {}).get("accuracy_vs_random")
        if oracle and oracle["ci_low"] is not None and oracle["ci_low"] > 0:
            resolved.append(report["task"])
            share = rows.get("fused", {}).get("oracle_share")
            if share:
                fused.append({"task": report["task"], "share": share["share"],
                              "share_ci_low": share["share_ci_low"]})
    return {"oracle_resolved_on": resolved, "fused_share_where_resolved": fused,
            "met": len(resolved) >= 2 and all(f["share"] is not None and f["share"] >= 0.8
                                               for f in fused)}


def _fmt(low: float | None, mid: float | None, high: float | None, digits: int = 3) -> str:
    if mid is None:
        return "-"
    inner = "" if low is None else f" [{low:+.{digits}f}, {high:+.{digits}f}]"
    return f"{mid:+.{digits}f}{inner}"


def summary_markdown(reports: list[dict], summary: dict) -> str:
    """One table over the tasks: each condition's accuracy difference from random with its
    interval, the share of the oracle's gain, the goal, the time and the machine."""
    conditions = [c for c in reports[0]["conditions"] if c != "random"] if reports else []
    head = "| condition | " + " | ".join(r["task"] for r in reports) + " |"
    lines = ["Accuracy minus `random`'s, 95% interval (share of the oracle's gain where the "
             "oracle's own gain is resolved):", "", head,
             "|---|" + "---|" * len(reports)]
    for c in conditions:
        cells = []
        for report in reports:
            row = next(r for r in report["aggregate"] if r["condition"] == c)
            d = row.get("accuracy_vs_random") or {}
            cell = _fmt(d.get("ci_low"), d.get("delta"), d.get("ci_high"))
            oracle = next(r for r in report["aggregate"] if r["condition"] == "oracle") \
                if "oracle" in report["conditions"] else None
            resolved = bool(oracle and (oracle.get("accuracy_vs_random") or {}).get("ci_low")
                            and oracle["accuracy_vs_random"]["ci_low"] > 0)
            share = row.get("oracle_share")
            if resolved and share and share.get("share") is not None:
                cell += (f" (share {share['share']:.2f} [{share['share_ci_low']:.2f}, "
                         f"{share['share_ci_high']:.2f}])")
            cells.append(cell)
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    goal, machine = summary["goal"], summary["machine"]
    timing = summary["timing"]
    lines += ["", f"Oracle's gain resolved (interval above 0) on: "
              f"{', '.join(goal['oracle_resolved_on']) or 'no task'}; goal (resolved on at "
              f"least two tasks, `fused` at 80% of it where resolved) "
              f"{'met' if goal['met'] else 'not met'}.",
              "", "Stage minutes per task (select + continued pretraining + MLM evaluation + "
              f"{'linear probes' if summary['settings'].get('ft_mode') == 'probe' else 'fine-tuning'}"
              ", all conditions and seeds): "
              + ", ".join(f"{t} {v['stage_minutes']}" for t, v in timing.items())
              + f". Machine: {machine['cpus']} CPUs, load average (1, 5, 15 min) before and "
              f"after each task {machine['load_average_1_5_15']}.", ""]
    general = summary.get("general_model") or {}
    if general.get("steps"):
        lines += [f"General model: {general.get('description', '')}; its training loss "
                  f"{general.get('loss_start')} -> {general.get('loss_end'):.3f} in "
                  f"{general.get('seconds', 0) / 60:.1f} minutes (made once, then cached).",
                  ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", required=True, help="An index of the multi-domain pool.")
    parser.add_argument("--seeds", type=Path, default=DEFAULT_SEEDS,
                        help="Folder of the corpus's <domain>.jsonl.gz seed files.")
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--work", type=Path, required=True,
                        help="Folder for the labelled files and each task's report folder "
                             "(resumable: finished runs are not run again).")
    parser.add_argument("--out", type=Path, required=True,
                        help="Folder for proxy.json, proxy.md and proxy-gains.png.")
    parser.add_argument("--run-seeds", default="0,1,2")
    parser.add_argument("--conditions", default=",".join(CONDITIONS))
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--model", default=None, help="Start from this model instead.")
    parser.add_argument("--budget", default="10000sent")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--ft-mode", default="full")
    parser.add_argument("--ft-epochs", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--name", default="proxy", help="Stem of the output files.")
    args = parser.parse_args(argv)
    settings = dict(conditions=args.conditions, seeds=args.run_seeds, budget=args.budget,
                    model=args.model, preset=args.preset, steps=args.steps,
                    batch_size=args.batch_size, max_length=args.max_length, lr=args.lr,
                    ft_mode=args.ft_mode, ft_epochs=args.ft_epochs, device=args.device,
                    group_field="doc", oracle_field="domain")
    reports, timing = [], {}
    started = time.time()
    loads = [_load()]
    for task in [t.strip() for t in args.tasks.split(",") if t.strip()]:
        labelled = _write_labelled(task, args.seeds, args.work / f"{task}-labelled.jsonl")
        t0 = time.time()
        report = tapt.bench_downstream(args.index, labelled, args.work / task, task_name=task,
                                       oracle_value=DOMAIN[task], **settings)
        loads.append(_load())
        stages = {}
        for run in sorted((args.work / task / "runs").glob("*/result.json")):
            for stage, seconds in json.loads(run.read_text())["seconds"].items():
                stages[stage] = stages.get(stage, 0.0) + seconds
        timing[task] = {"stage_seconds": {k: round(v, 1) for k, v in stages.items()},
                        "stage_minutes": round(sum(stages.values()) / 60, 1),
                        "wall_minutes_this_call": round((time.time() - t0) / 60, 1)}
        reports.append(report)
        (args.out / task).mkdir(parents=True, exist_ok=True)
        (args.out / task / "report.md").write_text((args.work / task / "report.md").read_text())
    args.out.mkdir(parents=True, exist_ok=True)
    general = reports[0]["settings"].get("general_model") if reports else None
    summary = {
        "format": "tapt-downstream-proxy", "settings": {**settings, "run_seeds": args.run_seeds},
        "general_model": general, "timing": timing, "goal": _goal(reports),
        "records": [r for report in reports for r in report["records"]],
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "load_average_1_5_15": loads,
                    "wall_minutes": round((time.time() - started) / 60, 1)},
        "versions": reports[0]["versions"] if reports else {},
    }
    tmp = args.out / f".{args.name}.json.tmp"
    tmp.write_text(json.dumps(summary, indent=1) + "\n")
    tmp.rename(args.out / f"{args.name}.json")
    # internal: the tasks' reports joined into one page and one plot; bench_downstream reports one
    #   task
    from tapt.bench.downstream_report import markdown, plot_gains  # the report's own pieces

    text = [f"# Downstream benchmark ({args.name})", ""]
    for report in reports:
        text += [f"## {report['task']}", "", markdown(report), ""]
    (args.out / f"{args.name}.md").write_text("\n".join(text))
    (args.out / f"{args.name}-summary.md").write_text(summary_markdown(reports, summary))
    plot_gains(reports, args.out / f"{args.name}-gains.png")
    print(json.dumps({"goal": summary["goal"], "timing": timing}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
