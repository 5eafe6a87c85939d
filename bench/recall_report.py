"""Tables and pictures of a `tapt bench recall` run: aggregate rows, markdown, PR curves."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np


def aggregate(results: list[dict]) -> list[dict]:
    """Mean (and std over repeats) of precision/recall/F1/seconds per method, seeds, budget,
    segment size and domain; plus an `all` domain = the mean over domains."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in results:
        groups[(r["method"], r["seeds"], r["budget"], r["segment_size"], r["domain"])].append(r)
    out = []
    for (method, seeds, budget, size, domain), rows in sorted(groups.items()):
        out.append({"method": method, "seeds": seeds, "budget": budget, "segment_size": size,
                    "domain": domain, "runs": len(rows),
                    **{k: round(float(np.mean([r[k] for r in rows])), 4)
                       for k in ("precision", "recall", "f1", "seconds")},
                    "precision_std": round(float(np.std([r["precision"] for r in rows])), 4)})
    per_domain: dict[tuple, list[dict]] = defaultdict(list)
    for r in out:
        per_domain[(r["method"], r["seeds"], r["budget"], r["segment_size"])].append(r)
    for (method, seeds, budget, size), rows in sorted(per_domain.items()):
        out.append({"method": method, "seeds": seeds, "budget": budget, "segment_size": size,
                    "domain": "all", "runs": sum(r["runs"] for r in rows),
                    **{k: round(float(np.mean([r[k] for r in rows])), 4)
                       for k in ("precision", "recall", "f1", "seconds")},
                    "precision_std": round(float(np.mean([r["precision_std"] for r in rows])), 4)})
    return out


def _order(methods: list[str], table: list[dict], key) -> list[str]:
    best = {m: np.mean([r["f1"] for r in table if key(r) and r["method"] == m] or [0])
            for m in methods}
    return sorted(methods, key=lambda m: -best[m])


def markdown(agg: list[dict], budgets: list[str]) -> str:
    """Per segment size and seed size: methods x (P / R / F1 at each budget), averaged over
    domains; then per-domain precision at the oracle budget."""
    lines = []
    sizes = sorted({r["segment_size"] for r in agg})
    seeds = sorted({r["seeds"] for r in agg})
    domains = sorted({r["domain"] for r in agg} - {"all"})
    for size in sizes:
        for n in seeds:
            rows = [r for r in agg if r["segment_size"] == size and r["seeds"] == n]
            if not rows:
                continue
            methods = _order(list(dict.fromkeys(r["method"] for r in rows)), rows,
                             lambda r: r["domain"] == "all")
            cell = {(r["method"], r["budget"], r["domain"]): r for r in rows}
            lines += [f"### {n} seeds, segment size {size}: mean over {len(domains)} domains",
                      "", "| method | " + " | ".join(f"P / R / F1 @ {b}" for b in budgets)
                      + " | runs | s / task |", "|---" * (len(budgets) + 3) + "|"]
            for m in methods:
                cells = [cell.get((m, b, "all")) for b in budgets]
                text = [f"{c['precision']:.3f} / {c['recall']:.3f} / {c['f1']:.3f}" if c else "-"
                        for c in cells]
                first = next(c for c in cells if c)
                lines.append(f"| {m} | " + " | ".join(text)
                             + f" | {first['runs']} | {first['seconds']:.1f} |")
            lines.append("")
            b0 = budgets[0]
            lines += [f"Precision per domain at budget {b0} (std over repeats in brackets):", "",
                      "| method | " + " | ".join(domains) + " | mean |",
                      "|---" * (len(domains) + 2) + "|"]
            for m in methods:
                cs = [cell.get((m, b0, d)) for d in domains]
                lines.append(f"| {m} | " + " | ".join(
                    (f"{c['precision']:.3f}" + (f" ({c['precision_std']:.3f})"
                                                if c["runs"] > 1 else "")) if c else "-"
                    for c in cs) + f" | **{cell[(m, b0, 'all')]['precision']:.3f}** |"
                    if (m, b0, "all") in cell else f"| {m} | - |")
            lines.append("")
    return "\n".join(lines)


def plot_pr_curves(curves: dict[str, dict[str, dict]], out_dir: Path,
                   oracle_sizes: dict[str, int]) -> list[Path]:
    """One small PNG per domain: precision against recall for every budget-independent method."""
    from tapt.bench import optional

    optional("matplotlib").use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for domain, methods in sorted(curves.items()):
        fig, ax = plt.subplots(figsize=(5, 3.6), dpi=80)
        for name, c in sorted(methods.items()):
            if c:
                ax.plot(c["recall"], c["precision"], label=name, linewidth=1.2)
        ax.set(xlabel="recall", ylabel="precision", xlim=(0, 1), ylim=(0, 1.02),
               title=f"{domain} ({oracle_sizes.get(domain, 0):,} oracle sentences)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="lower left", ncol=2)
        fig.tight_layout()
        path = out_dir / f"pr-{domain}.png"
        tmp = path.with_name(f".{path.name}.tmp.png")
        fig.savefig(tmp)
        plt.close(fig)
        tmp.replace(path)
        paths.append(path)
    return paths
