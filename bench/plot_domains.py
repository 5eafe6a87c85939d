"""A 2-D PCA map of the stored embeddings (Aharoni & Goldberg's Figure 1), coloured by a label
or any metadata field (a corpus without labels: its `source`, or any field its records carry),
or by a selection's scores; a selection's sentences overlaid."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tapt.errors import InputError
from tapt.indexer.index import Index

PNG_SOFTWARE = "tapt plot domains"
SCORE = "score"         # `color_by`: the selection's segment scores
_LEGEND = 12            # values named in the legend; the others drawn as "(other)"


def tapt_png(path: Path, software: str = PNG_SOFTWARE) -> bool:
    """A PNG a tapt plot command wrote (its Software text chunk says so)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return head.startswith(b"\x89PNG") and b"Software\x00" + software.encode() in head


def _field_values(index: Index, rows: np.ndarray, field: str) -> np.ndarray:
    """`field` of the sampled rows' records ("source", "doc_key" or a corpus field; '' where
    missing)."""
    out = np.empty(len(rows), dtype=object)
    seen = False
    for i, record in enumerate(index.store.iter_records(rows.tolist())):
        value = (record.get(field) if field in ("source", "doc_key")
                 else (record.get("meta") or {}).get(field))
        seen = seen or value is not None
        out[i] = "" if value is None else str(value)
    if not seen:
        raise InputError(f"no sampled sentence of index {index.path} has a '{field}' field: "
                         f"colour by source, by another field, or by {SCORE} with a selection",
                         param="color_by")
    return out


def plot_domains(index: Index, out: Path, label_field: str = "domain", sample: int = 8000,
                 selection: Path | None = None, seed: int = 0,
                 color_by: str | None = None) -> dict:
    """Write a small PNG; returns counts of what was drawn. `out` may replace only a plot this
    command wrote; never another file, an input or a file inside an index. `color_by`: a field
    (default `label_field`) or "score" (the selected sentences by their segment's score, the
    others grey; needs `selection`)."""
    from tapt.bench import optional
    from tapt.retriever.selections.file_format import iter_selection, manifest_path
    from tapt.util.safety import check_output

    inputs = [index.path] + ([selection, manifest_path(selection)] if selection else [])
    check_output(out, what="plot", inputs=inputs, ours=tapt_png)
    color_by = color_by or label_field
    if color_by == SCORE and selection is None:
        raise InputError(f"{SCORE} colours a selection's sentences: give `selection`",
                         param="color_by")

    optional("matplotlib").use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.decomposition import PCA

    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(index.n_sentences, size=min(sample, index.n_sentences),
                              replace=False))
    pca = PCA(n_components=2, random_state=seed).fit(np.asarray(index.embeddings[rows]))
    xy = pca.transform(np.asarray(index.embeddings[rows]))
    fig, ax = plt.subplots(figsize=(6, 5), dpi=80)
    segments = list(iter_selection(selection)) if selection is not None else []
    if color_by == SCORE:
        ax.scatter(xy[:, 0], xy[:, 1], s=2, alpha=0.3, c="#bbbbbb", label="not selected")
        sel = np.concatenate([np.arange(*s.rows) for s in segments]) if segments else \
            np.zeros(0, np.int64)
        scores = np.concatenate([np.full(s.rows[1] - s.rows[0], s.score) for s in segments]) \
            if segments else np.zeros(0)
        pick = rng.permutation(len(sel))[:sample]
        sxy = pca.transform(np.asarray(index.embeddings[np.sort(sel[pick])])) if len(pick) \
            else np.zeros((0, 2))
        drawn = ax.scatter(sxy[:, 0], sxy[:, 1], s=4, c=scores[pick][np.argsort(sel[pick])],
                           cmap="viridis", label=f"selected ({selection.name})")
        fig.colorbar(drawn, ax=ax, label="segment score")
        selected = len(pick)
    else:
        labels = _field_values(index, rows, color_by)
        names, counts = np.unique(labels, return_counts=True)
        shown = set(names[np.argsort(-counts, kind="stable")][:_LEGEND])
        labels = np.where(np.isin(labels, list(shown)), labels, "(other)")
        for name in sorted(set(labels)):
            mask = labels == name
            ax.scatter(xy[mask, 0], xy[mask, 1], s=2, alpha=0.5, label=name or "(none)")
        selected = 0
        if segments:
            sel = np.concatenate([np.arange(*s.rows) for s in segments])
            sel = rng.permutation(sel)[: sample // 4]
            sxy = pca.transform(np.asarray(index.embeddings[np.sort(sel)]))
            ax.scatter(sxy[:, 0], sxy[:, 1], s=3, c="black", marker="x", linewidths=0.4,
                       label=f"selected ({selection.name})")
            selected = len(sel)
    ax.set(title=f"{index.path.name}: PCA of {len(rows):,} sentences by {color_by}",
           xticks=[], yticks=[])
    ax.legend(fontsize=7, markerscale=4, loc="best")
    write_png(fig, out, PNG_SOFTWARE)
    return {"sentences": int(len(rows)), "selected_drawn": int(selected)}


def write_png(fig, out: Path, software: str) -> None:
    """Save a matplotlib figure as a PNG marked as `software`'s (`tapt_png`), atomically."""
    import io

    import matplotlib.pyplot as plt

    from tapt.util.files import atomic_write

    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", metadata={"Software": software})
    plt.close(fig)
    with atomic_write(out, "wb") as fh:
        fh.write(png.getvalue())
