"""The report of `tapt bench downstream`: per condition the mean and spread over seeds of test
accuracy and macro-F1, the per-seed values, the change against no continued pretraining on the
same seed (same split, same fine-tuning seed), selection sizes and seconds per stage; written as
`report.json` and `report.md`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from tapt.util.files import atomic_write, write_json_atomic
from tapt.util.versions import library_versions, utc_now


def _spread(values: Sequence[float]) -> dict[str, Any]:
    """Mean, sample standard deviation (0 for one value), min and max."""
    a = np.asarray(values, dtype=np.float64)
    return {"mean": round(float(a.mean()), 4),
            "std": round(float(a.std(ddof=1)) if len(a) > 1 else 0.0, 4),
            "min": round(float(a.min()), 4), "max": round(float(a.max()), 4)}


def aggregate(results: Sequence[dict[str, Any]], conditions: Sequence[str]
              ) -> list[dict[str, Any]]:
    """One row per condition (in `conditions` order) over its seeds.

    Args:
        results: The runs' completion records.
        conditions: The conditions, in report order.

    Returns:
        Rows with accuracy and macro_f1 (mean, std, min, max), per-seed values, the paired
        change against `none` where it ran on the same seeds, selection sentences and the
        mean seconds of each stage.
    """
    none = {r["seed"]: r for r in results if r["condition"] == "none"}
    rows = []
    for condition in conditions:
        runs = sorted((r for r in results if r["condition"] == condition),
                      key=lambda r: r["seed"])
        if not runs:
            continue
        row: dict[str, Any] = {"condition": condition, "seeds": [r["seed"] for r in runs]}
        for metric in ("accuracy", "macro_f1"):
            row[metric] = _spread([r[metric] for r in runs])
            row[f"{metric}_per_seed"] = [round(r[metric], 4) for r in runs]
            if condition != "none" and all(r["seed"] in none for r in runs):
                row[f"{metric}_vs_none"] = _spread([r[metric] - none[r["seed"]][metric]
                                                    for r in runs])
        selections = [r["selection"] for r in runs if r.get("selection")]
        if selections:
            row["selection_sentences"] = round(float(np.mean([s["sentences"]
                                                              for s in selections])), 1)
            shares = [s["oracle_share"] for s in selections if s.get("oracle_share") is not None]
            row["oracle_share"] = round(float(np.mean(shares)), 4) if shares else None
        stages = sorted({k for r in runs for k in r["seconds"]})
        row["seconds"] = {k: round(float(np.mean([r["seconds"].get(k, 0.0) for r in runs])), 1)
                          for k in stages}
        pre = [r["pretrain"]["train_loss"] for r in runs
               if r.get("pretrain") and r["pretrain"].get("train_loss") is not None]
        row["pretrain_final_loss"] = round(float(np.mean(pre)), 4) if pre else None
        rows.append(row)
    return rows


def _cell(spread: dict[str, Any] | None, signed: bool = False) -> str:
    if not spread:
        return "-"
    return f"{spread['mean']:{'+' if signed else ''}.3f} ± {spread['std']:.3f}"


def markdown(report: dict[str, Any]) -> str:
    """The report as a Markdown table with its settings.

    Args:
        report: What `write_report` writes as report.json.

    Returns:
        The Markdown text.
    """
    s = report["settings"]
    lines = [
        f"Downstream classification, labels {', '.join(s['labels'])}: "
        f"{s['train_size']} training / {s['test_size']} test examples; continued pretraining "
        f"{s['pretrain']['steps']} steps (batch {s['pretrain']['batch_size']}, max length "
        f"{s['pretrain']['max_length']}) on {s['budget']} per condition; fine-tuning "
        + (f"{s['finetune']['steps']} steps" if s["finetune"]["steps"]
           else f"{s['finetune']['epochs']} epochs")
        + f" (batch {s['finetune']['batch_size']}); seeds {', '.join(map(str, report['seeds']))}; "
        f"device {report['device']}.",
        "",
        "| condition | accuracy | macro-F1 | Δ accuracy vs none | Δ macro-F1 vs none | "
        "per-seed macro-F1 | selected sentences | oracle share | seconds (select / pretrain / "
        "fine-tune) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in report["aggregate"]:
        sec = row["seconds"]
        share = row.get("oracle_share")
        lines.append(
            f"| {row['condition']} | {_cell(row['accuracy'])} | {_cell(row['macro_f1'])} | "
            f"{_cell(row.get('accuracy_vs_none'), True)} | "
            f"{_cell(row.get('macro_f1_vs_none'), True)} | "
            f"{', '.join(f'{v:.3f}' for v in row['macro_f1_per_seed'])} | "
            f"{row.get('selection_sentences', '-')} | "
            f"{'-' if share is None else f'{share:.2f}'} | "
            f"{sec.get('select', 0):.0f} / {sec.get('pretrain', 0):.0f} / "
            f"{sec.get('finetune', 0):.0f} |")
    first = report["aggregate"][0]["accuracy"]["mean"] if report["aggregate"] else 0.5
    se = (first * (1 - first) / s["test_size"]) ** 0.5
    lines += ["", "Mean ± sample standard deviation over seeds; Δ: the paired difference from "
              "`none` on the same seed (same split, same fine-tuning seed). Oracle share: the "
              f"share of selected sentences whose `{s['oracle_field']}` is "
              f"`{s['oracle_value']}`. With {s['test_size']} test examples one accuracy "
              f"has a binomial standard error of about {se:.3f} (at "
              f"{report['aggregate'][0]['condition'] if report['aggregate'] else '-'}'s "
              "accuracy), beside the spread over seeds.", ""]
    return "\n".join(lines)


def write_report(out: Path, settings: dict[str, Any], results: Sequence[dict[str, Any]],
                 conditions: Sequence[str], seeds: Sequence[int], device: str) -> dict[str, Any]:
    """Aggregate the runs and write OUT/report.json and OUT/report.md (atomically).

    Args:
        out: The report folder.
        settings: The configuration (as in OUT/settings.json).
        results: Every run's completion record.
        conditions: The conditions asked for, in order.
        seeds: The seeds asked for.
        device: The device of this invocation.

    Returns:
        The report.
    """
    runs = [{k: v for k, v in r.items() if k not in ("finetune", "pretrain")}
            | {"finetune_steps": r["finetune"]["steps"],
               "pretrain_final_loss": (r.get("pretrain") or {}).get("train_loss")}
            for r in results]
    report = {"format": "tapt-bench-downstream-report", "settings": settings,
              "conditions": list(conditions), "seeds": list(seeds), "device": device,
              "aggregate": aggregate(results, conditions), "runs": runs,
              "created": utc_now(), "versions": library_versions(),
              "loss_curves": "runs/<condition>-seed<k>/result.json"}
    write_json_atomic(out / "report.json", report)
    with atomic_write(out / "report.md") as fh:
        fh.write(markdown(report))
    return report
