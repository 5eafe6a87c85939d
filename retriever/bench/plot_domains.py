"""A 2-D PCA map of the stored embeddings coloured by label (Aharoni & Goldberg's Figure 1),
optionally with a selection's sentences overlaid."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tapt.indexer.index import Index
from tapt.retriever.evaluation.oracle import sentence_labels


PNG_SOFTWARE = "tapt plot domains"


def _is_tapt_png(path: Path) -> bool:
    """A PNG this command wrote (its Software text chunk says so)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return head.startswith(b"\x89PNG") and b"Software\x00" + PNG_SOFTWARE.encode() in head


def plot_domains(index: Index, out: Path, label_field: str = "domain", sample: int = 8000,
                 selection: Path | None = None, seed: int = 0) -> dict:
    """Write a small PNG; returns counts of what was drawn. `out` may replace only a plot this
    command wrote; never another file, an input or a file inside an index."""
    import io

    from tapt.util.files import atomic_write
    from tapt.util.safety import check_output

    from . import optional

    from tapt.retriever.selections.file_format import manifest_path

    inputs = [index.path] + ([selection, manifest_path(selection)] if selection else [])
    check_output(out, what="plot", inputs=inputs, ours=_is_tapt_png)

    optional("matplotlib").use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.decomposition import PCA

    labels = sentence_labels(index, label_field)
    rows = np.sort(np.random.default_rng(seed).choice(
        index.n_sentences, size=min(sample, index.n_sentences), replace=False))
    pca = PCA(n_components=2, random_state=seed).fit(np.asarray(index.embeddings[rows]))
    xy = pca.transform(np.asarray(index.embeddings[rows]))
    fig, ax = plt.subplots(figsize=(6, 5), dpi=80)
    for name in sorted(set(labels[rows])):
        mask = labels[rows] == name
        ax.scatter(xy[mask, 0], xy[mask, 1], s=2, alpha=0.5, label=name or "(none)")
    drawn = 0
    if selection is not None:
        from tapt.retriever.selections.file_format import iter_selection

        sel = np.concatenate([np.arange(*s.rows) for s in iter_selection(selection)])
        sel = np.random.default_rng(seed).permutation(sel)[: sample // 4]
        sxy = pca.transform(np.asarray(index.embeddings[np.sort(sel)]))
        ax.scatter(sxy[:, 0], sxy[:, 1], s=3, c="black", marker="x", linewidths=0.4,
                   label=f"selected ({selection.name})")
        drawn = len(sel)
    ax.set(title=f"{index.path.name}: PCA of {len(rows):,} sentences", xticks=[], yticks=[])
    ax.legend(fontsize=7, markerscale=4, loc="best")
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", metadata={"Software": PNG_SOFTWARE})
    plt.close(fig)
    with atomic_write(out, "wb") as fh:
        fh.write(png.getvalue())
    return {"sentences": int(len(rows)), "selected_drawn": drawn}
