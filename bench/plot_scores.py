"""The score distribution of a selection with its budget's cut (`tapt plot scores`): the
selected segments' scores over the seeded sample of the corpus's segment scores that a
selection made with `explain` keeps (at sentence context), the cut as a line."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tapt.errors import InputError

PNG_SOFTWARE = "tapt plot scores"


def plot_scores(selection: Path, out: Path, bins: int = 40) -> dict:
    """Write the PNG; `out` may replace only a plot of this command.

    Returns:
        {"selected", "sampled", "cut"}: what was drawn.
    """
    from tapt.bench import optional
    from tapt.bench.plot_domains import tapt_png, write_png
    from tapt.retriever.selections.file_format import manifest_path
    from tapt.retriever.selections.selection import Selection
    from tapt.util.safety import check_output

    check_output(out, what="plot", inputs=[selection, manifest_path(selection)],
                 ours=lambda path: tapt_png(path, PNG_SOFTWARE))
    sel = Selection.read(selection)
    if not len(sel):
        raise InputError(f"selection {selection} holds no segment to draw", param="selection")
    chosen = np.array([s.score for s in sel.segments], dtype=np.float64)
    explain = sel.manifest.get("explain") or {}
    sample = np.array((explain.get("sample") or {}).get("scores") or [], dtype=np.float64)
    cut = float(explain.get("cut", chosen[-1]) if explain.get("cut") is not None
                else chosen[-1])
    optional("matplotlib").use("Agg")
    import matplotlib.pyplot as plt

    values = np.concatenate([sample, chosen])
    edges = np.linspace(values.min(), values.max() if values.max() > values.min()
                        else values.min() + 1, bins + 1)
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=80)
    if len(sample):
        ax.hist(sample, bins=edges, color="#b9c4d3",
                label=f"{len(sample):,} random segments of {explain['sample']['of']:,}")
    ax.hist(chosen, bins=edges, color="#4a78b5", alpha=0.85,
            label=f"{len(chosen):,} selected")
    ax.axvline(cut, color="#a00000", lw=2, label=f"the budget's cut ({cut:.4g})")
    ax.set(title=f"{sel.method}: score distribution", xlabel="score", ylabel="segments")
    ax.legend(fontsize=7)
    write_png(fig, out, PNG_SOFTWARE)
    return {"selected": int(len(chosen)), "sampled": int(len(sample)), "cut": cut}
