"""Scoring, exporting, showing and benchmarking selections: `tapt.evaluate`, `tapt.export`,
`tapt.show`, `tapt.plot_scores` and `tapt.bench_recall` (`tapt eval`, `tapt export`, `tapt
show`, `tapt plot scores`, `tapt bench recall`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from tapt.api.arguments import PathLike
from tapt.errors import InputError
from tapt.retriever.selections.selection import Selection

if TYPE_CHECKING:
    from tapt.api.index import Index


def evaluate(selections: PathLike | Sequence[PathLike], index: PathLike | Index, *, label: str,
             label_field: str = "domain") -> list[dict[str, Any]]:
    """Precision, recall and F1 of selections against an index's oracle labels, in sentences
    (`tapt eval`).

    Args:
        selections: Selection files made from `index`.
        index: The index (or its directory) the selections were made from.
        label: The label that counts as relevant (the task's).
        label_field: The metadata field holding the oracle label.

    Returns:
        One row per selection: selection, method, segments, selected, precision, recall, f1,
            seconds.
    """
    from tapt.retriever.evaluation.evaluate import evaluate_selections
    from tapt.util.checks import path_list

    paths = path_list(selections, "selections")
    if not paths:
        raise InputError("give at least one selection file", param="selections")
    for name, value in (("label", label), ("label_field", label_field)):
        if not isinstance(value, str) or not value:
            raise InputError(f"must be a non-empty string, got {value!r}", param=name)
    return evaluate_selections(list(paths), index, label_field, label)


def export(selection: PathLike | Selection, out: PathLike | Any, format: str | None = None, *,
           overwrite: bool = False) -> dict[str, Any]:
    """Write a selection as training data (`tapt export`): one example per segment.

    Args:
        selection: A selection file, or a `Selection`.
        out: The file (a folder for hf) to write, or a text stream (jsonl or txt lines).
        format: jsonl, parquet, hf or txt (default: from `out`'s suffix; jsonl for a stream).
        overwrite: Replace an export tapt wrote at `out` that may have changed since.

    Returns:
        format, segments and sentences written.
    """
    from tapt.retriever.selections.selection import export_format
    from tapt.util.checks import flag, path_text, shown

    flag(overwrite, "overwrite")
    if format is not None and not isinstance(format, str):
        raise InputError(f"must be jsonl, parquet, hf, txt or None, got {shown(format)}",
                         param="format")
    if not hasattr(out, "write"):
        path_text(out, "out")
    sel = selection if isinstance(selection, Selection) else Selection.read(
        path_text(selection, "selection"))
    if hasattr(out, "write"):
        fmt = format or "jsonl"
        out.writelines(sel.lines(fmt))
    else:
        fmt = export_format(out, format)
        sel.export(out, fmt, overwrite=overwrite)
    return {"format": fmt, "segments": len(sel),
            "sentences": int(sum(len(s) for s in sel.sentences))}


def show(selection: PathLike | Selection, *, top: int = 10, field: str = "source"
         ) -> dict[str, Any]:
    """What a selection holds (`tapt show`): its top segments with the parts of their scores
    (a selection made with `explain`) and its share by a metadata field.

    Args:
        selection: A selection file (or a `Selection`).
        top: Segments listed, best first.
        field: The field the share is counted by: `source`, `doc_key` or any corpus field.

    Returns:
        {"method", "counts", "parts", "cut", "top": [...], "share": [...]}
        (`retriever.selections.summary.summary`).
    """
    from tapt.errors import InputError
    from tapt.retriever.selections.summary import summary

    if isinstance(top, bool) or not isinstance(top, int) or top < 0:
        raise InputError(f"must be a whole number >= 0, not {top!r}", param="top")
    sel = selection if isinstance(selection, Selection) else Selection.read(selection)
    return summary(sel, top, field)


def plot_scores(selection: PathLike, out: PathLike, *, bins: int = 40) -> dict[str, Any]:
    """Draw a selection's score distribution with its budget's cut (`tapt plot scores`): the
    selected segments' scores, over the sample of the corpus's scores that a selection made
    with `explain` at sentence context keeps.

    Args:
        selection: The selection file.
        out: The PNG to write (replaces only a plot tapt wrote).
        bins: Bars of the histogram.

    Returns:
        {"selected", "sampled", "cut"}.
    """
    from pathlib import Path

    from tapt.bench.plot_scores import plot_scores as draw
    from tapt.errors import InputError

    if isinstance(bins, bool) or not isinstance(bins, int) or not 1 <= bins <= 1000:
        raise InputError(f"must be a whole number in 1..1000, not {bins!r}", param="bins")
    return draw(Path(selection), Path(out), bins)
