"""The report of `tapt bench downstream`: per condition the cross-validated accuracy over every
labelled example and seed, its paired difference from `random` (the control for extra
training) and from `none` (no continued pretraining) with 95% bootstrap intervals, the share of
the oracle's gain each method recovers, the held-out in-domain masked-LM loss, the differences
in every fold and seed, selection sizes and seconds per stage; written as `report.json`,
`report.md` and `gains.png` (where matplotlib is installed)."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from tapt.bench import downstream_stats as stats
from tapt.bench.downstream_finetune import classification_scores
from tapt.util.files import atomic_write, write_json_atomic
from tapt.util.versions import library_versions, utc_now

log = logging.getLogger(__name__)

CONTROLS = ("none", "random", "oracle")


def _r(value: float | None, digits: int = 4) -> float | None:
    return None if value is None or not math.isfinite(value) else round(float(value), digits)


def _rounded(d: dict[str, float]) -> dict[str, float | None]:
    return {k: _r(v) for k, v in d.items()}


def build_report(settings: dict[str, Any], results: Sequence[dict[str, Any]],
                 conditions: Sequence[str], seeds: Sequence[int], labels: np.ndarray,
                 group_of: np.ndarray, fold_of: Sequence[np.ndarray], names: Sequence[str],
                 task: str, device: str) -> dict[str, Any]:
    """Every condition's scores, paired differences and intervals from the runs' records.

    Args:
        settings: The configuration (as in OUT/settings.json).
        results: Every run's completion record (`predicted`, `mlm`, `selection`, `seconds`).
        conditions: The conditions, in report order.
        seeds: The seeds, in order.
        labels: Every labelled example's label number.
        group_of: Every example's group number.
        fold_of: Per seed, every example's fold.
        names: The label names.
        task: The task's name in the records.
        device: The device of this invocation.

    Returns:
        The report (what report.json holds).
    """
    by = {(r["condition"], r["seed"]): r for r in results}
    n_groups = int(group_of.max()) + 1
    correct = {c: np.array([np.asarray(by[c, s]["predicted"]) == labels for s in seeds],
                           dtype=np.float64) for c in conditions}
    ones = np.ones((len(seeds), len(labels)))
    accuracy = stats.resample_ratio(
        {c: stats.group_totals(correct[c], group_of, n_groups) for c in conditions},
        {c: stats.group_totals(ones, group_of, n_groups) for c in conditions},
        seed=int(seeds[0]))
    doc_groups = np.asarray(by[conditions[0], seeds[0]]["mlm"]["groups"], dtype=np.int64)
    mlm = stats.resample_ratio(
        {c: stats.group_totals([by[c, s]["mlm"]["loss_sums"] for s in seeds], doc_groups,
                               n_groups) for c in conditions},
        {c: stats.group_totals([by[c, s]["mlm"]["tokens"] for s in seeds], doc_groups,
                               n_groups) for c in conditions},
        seed=int(seeds[0]) + 1)
    rows, records, per_fold = [], [], {}
    for c in conditions:
        runs = [by[c, s] for s in seeds]
        scores = [classification_scores(labels, r["predicted"]) for r in runs]
        row: dict[str, Any] = {
            "condition": c, "seeds": list(seeds),
            "accuracy": _r(accuracy.point[c]),
            "accuracy_per_seed": [_r(x["accuracy"]) for x in scores],
            "macro_f1": _r(float(np.mean([x["macro_f1"] for x in scores]))),
            "mlm_loss": _r(mlm.point[c]),
            "mlm_loss_per_seed": [_r(float(np.sum(r["mlm"]["loss_sums"])
                                          / np.sum(r["mlm"]["tokens"]))) for r in runs],
            "mlm_trained_on_test_text": c == "task",
        }
        for ref in ("random", "none"):
            if ref in conditions and c != ref:
                row[f"accuracy_vs_{ref}"] = _rounded(stats.difference(accuracy, c, ref))
                row[f"mlm_loss_vs_{ref}"] = _rounded(stats.difference(mlm, c, ref))
                per_fold.setdefault(c, {})[f"vs_{ref}"] = stats.per_fold_differences(
                    correct, fold_of, c, ref)
        if c not in CONTROLS and {"random", "oracle"} <= set(conditions):
            row["oracle_share"] = _rounded(stats.oracle_share(accuracy, c))
        selections = [r["selection"] for r in runs if r.get("selection")]
        if selections:
            row["selection_sentences"] = _r(float(np.mean([s["sentences"] for s in selections])),
                                            1)
            shares = [s["oracle_share"] for s in selections if s.get("oracle_share") is not None]
            row["domain_share"] = _r(float(np.mean(shares))) if shares else None
        stages = sorted({k for r in runs for k in r["seconds"]})
        row["seconds"] = {k: _r(float(np.mean([r["seconds"].get(k, 0.0) for r in runs])), 1)
                          for k in stages}
        losses = [r["pretrain"]["train_loss"] for r in runs
                  if r.get("pretrain") and r["pretrain"].get("train_loss") is not None]
        row["pretrain_final_loss"] = _r(float(np.mean(losses))) if losses else None
        rows.append(row)
        if c != "random" and "random" in conditions:
            vs = row["accuracy_vs_random"]
            record = {"task": task, "condition": c, "delta_vs_random": vs["delta"],
                      "ci_low": vs["ci_low"], "ci_high": vs["ci_high"],
                      "accuracy": row["accuracy"], "mlm_loss": row["mlm_loss"]}
            if "oracle_share" in row:
                record["oracle_share"] = row["oracle_share"]["share"]
                record["share_ci_low"] = row["oracle_share"]["share_ci_low"]
            records.append(record)
    return {"format": "tapt-bench-downstream-report", "format_version": 2, "task": task,
            "settings": settings, "conditions": list(conditions), "seeds": list(seeds),
            "device": device, "labels": list(names), "examples": int(len(labels)),
            "groups": n_groups, "folds": int(max(int(f.max()) for f in fold_of)) + 1,
            "bootstrap": {"draws": stats.DRAWS, "resampled": ["seeds", "groups"]},
            "aggregate": rows, "records": records, "per_fold": per_fold,
            "created": utc_now(), "versions": library_versions(),
            "runs": "runs/<condition>-seed<k>/result.json"}


def _ci(d: dict[str, Any] | None, signed: bool = True) -> str:
    if not d or d.get("delta") is None:
        return "-"
    low, high = d.get("ci_low"), d.get("ci_high")
    inner = "" if low is None else f" [{low:+.3f}, {high:+.3f}]"
    return f"{d['delta']:{'+' if signed else ''}.3f}{inner}"


def _share(d: dict[str, Any] | None, resolved: bool) -> str:
    if not d:
        return "-"
    if not resolved or d.get("share") is None:
        return "n/r"
    low, high = d.get("share_ci_low"), d.get("share_ci_high")
    inner = "" if low is None else f" [{low:.2f}, {high:.2f}]"
    return f"{d['share']:.2f}{inner}"


def markdown(report: dict[str, Any]) -> str:
    """The report as Markdown: what ran, one table, and how to read it.

    Args:
        report: What `build_report` returns.

    Returns:
        The Markdown text.
    """
    s = report["settings"]
    p, ft = s["pretrain"], s["finetune"]
    general = s.get("general_model", {})
    lines = [
        f"Task `{report['task']}`: {report['examples']:,} labelled examples in "
        f"{report['groups']:,} documents, labels {', '.join(report['labels'])}; "
        f"{report['folds']}-fold cross-validation by document, so every example is a test "
        f"example once per seed; seeds {', '.join(map(str, report['seeds']))}; device "
        f"{report['device']}. Starting model: {general.get('description', s['model'])}. "
        f"Every condition but `none` continues it for {p['steps']} steps (batch "
        f"{p['batch_size']}, length {p['max_length']}, lr {p['lr']:g}) on {s['budget']} of "
        f"its data; fine-tuning: {ft['mode']}"
        + ("" if ft["mode"] == "probe" else
           f", {ft['steps'] or ft['epochs']} {'steps' if ft['steps'] else 'epochs'}, batch "
           f"{ft['batch_size']}, lr {ft['lr']:g} (head {ft['head_lr']:g})") + ".",
        "",
        "| condition | accuracy | Δ vs random [95% CI] | Δ vs none [95% CI] | share of the "
        "oracle's gain [95% CI] | held-out MLM loss | Δ loss vs random [95% CI] | selected "
        "sentences (domain share) | seconds (select / pretrain / MLM eval / fine-tune) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    oracle = next((r.get("accuracy_vs_random") for r in report["aggregate"]
                   if r["condition"] == "oracle"), None) or {}
    resolved = oracle.get("ci_low") is not None and oracle["ci_low"] > 0
    for row in report["aggregate"]:
        sec = row["seconds"]
        sentences = row.get("selection_sentences")
        domain = row.get("domain_share")
        sel = "-" if sentences is None else (
            f"{sentences:,.0f}" + ("" if domain is None else f" ({domain:.2f})"))
        loss = "-" if row["mlm_loss"] is None else f"{row['mlm_loss']:.3f}" + (
            "*" if row.get("mlm_trained_on_test_text") else "")
        lines.append(
            f"| {row['condition']} | {row['accuracy']:.3f} | "
            f"{_ci(row.get('accuracy_vs_random'))} | {_ci(row.get('accuracy_vs_none'))} | "
            f"{_share(row.get('oracle_share'), resolved)} | {loss} | "
            f"{_ci(row.get('mlm_loss_vs_random'))} | {sel} | "
            f"{sec.get('select', 0):.0f} / {sec.get('pretrain', 0):.0f} / "
            f"{sec.get('mlm_eval', 0):.0f} / {sec.get('finetune', 0):.0f} |")
    lines += [
        "",
        "Accuracy: over every example and seed. Δ: the paired difference in accuracy (same "
        "examples, folds and seeds); intervals: 2.5 and 97.5 percentiles of "
        f"{report['bootstrap']['draws']:,} bootstrap draws that resample the seeds and the "
        "documents. Share of the oracle's gain: (condition - random) / (oracle - random), "
        "computed draw by draw; n/r where the oracle's own gain is not resolved (its interval "
        "reaches 0), so that there is no gain to share. Held-out MLM loss: nats per masked token on the labelled "
        "texts (held out from the index by document), the same masks for every condition"
        + ("; * `task` trained on these texts, so its loss is not held out" if any(
            r.get("mlm_trained_on_test_text") for r in report["aggregate"]) else "")
        + ". Domain share: the share of selected sentences from the task's domain.",
        ""]
    return "\n".join(lines)


def plot_gains(reports: Sequence[dict[str, Any]], path: Path) -> bool:
    """One panel per task: each condition's accuracy difference from `random` with its 95%
    interval.

    Args:
        reports: `build_report` results (one per task).
        path: The PNG to write.

    Returns:
        True when written (False without matplotlib).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.info("matplotlib is not installed: no plot of the gains")
        return False
    fig, axes = plt.subplots(1, len(reports), figsize=(4.2 * len(reports), 3.2), squeeze=False,
                             sharex=False)
    for ax, report in zip(axes[0], reports):
        rows = [r for r in report["aggregate"] if r.get("accuracy_vs_random")]
        ys = np.arange(len(rows))[::-1]
        for y, row in zip(ys, rows):
            d = row["accuracy_vs_random"]
            low = d["ci_low"] if d["ci_low"] is not None else d["delta"]
            high = d["ci_high"] if d["ci_high"] is not None else d["delta"]
            color = "tab:green" if low > 0 else "tab:red" if high < 0 else "tab:gray"
            ax.errorbar(d["delta"], y, xerr=[[d["delta"] - low], [high - d["delta"]]],
                        fmt="o", color=color, capsize=3)
        ax.axvline(0, color="black", linewidth=0.8)
        ax.set_yticks(ys, [r["condition"] for r in rows])
        ax.set_xlabel("accuracy - random's (95% CI)")
        ax.set_title(report["task"])
    fig.tight_layout()
    with atomic_write(path, mode="wb") as fh:
        fig.savefig(fh, format="png", dpi=110)
    plt.close(fig)
    return True


def write_report(out: Path, report: dict[str, Any]) -> dict[str, Any]:
    """Write OUT/report.json, OUT/report.md and OUT/gains.png (atomically).

    Args:
        out: The report folder.
        report: What `build_report` returns.

    Returns:
        The report.
    """
    write_json_atomic(out / "report.json", report)
    with atomic_write(out / "report.md") as fh:
        fh.write(markdown(report))
    plot_gains([report], out / "gains.png")
    return report
