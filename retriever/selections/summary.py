"""What a selection holds, without a page (`tapt show`): its top segments with the parts of
their scores (a selection made with `explain`), and its share by a metadata field."""

from __future__ import annotations

from collections import Counter
from typing import Any

from tapt.retriever.selections.file_format import SelectedSegment
from tapt.retriever.selections.selection import Selection


def field_value(segment: SelectedSegment, field: str) -> str:
    """A segment's value of `field`: `source`, `doc_key`, a corpus field its sentences share,
    or the distinct values of its sentences joined by " | " ("(none)" where it has none)."""
    if field in ("source", "doc_key"):
        value = getattr(segment, field)
    elif field in segment.meta:
        value = segment.meta[field]
    else:
        each = sorted({str(m[field]) for m in segment.sentence_meta or [] if field in m})
        value = " | ".join(each) if each else None
    return "(none)" if value is None else str(value)


def summary(selection: Selection, top: int = 10, field: str = "source") -> dict[str, Any]:
    """The top segments and the share by `field`.

    Args:
        selection: The selection.
        top: Segments listed, best first.
        field: The field the share is counted by (`field_value`).

    Returns:
        {"method", "counts", "parts" (the names, [] without `explain`), "cut" (the last
        segment's score), "top": [{"rank", "score", "parts", "own", "document", "nearest",
        "text", field}], "share": [{"value", "segments", "sentences", "share"}] by sentences,
        largest first}.
    """
    segments = selection.segments
    parts: list[str] = list((selection.manifest.get("explain") or {}).get("parts") or [])
    rows = []
    for segment in segments[:max(0, top)]:
        why = segment.explain or {}
        rows.append({"rank": segment.rank, "score": segment.score,
                     "parts": dict(why.get("parts") or {}), "own": why.get("own"),
                     "document": why.get("document"),
                     "nearest": [n.get("sentence") for n in why.get("nearest") or []],
                     "text": segment.text, field: field_value(segment, field)})
    sentences: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for segment in segments:
        value = field_value(segment, field)
        counts[value] += 1
        sentences[value] += segment.rows[1] - segment.rows[0]
    total = sum(sentences.values()) or 1
    share = [{"value": value, "segments": counts[value], "sentences": n,
              "share": round(n / total, 4)}
             for value, n in sorted(sentences.items(), key=lambda kv: (-kv[1], kv[0]))]
    return {"method": selection.method, "counts": selection.counts, "parts": parts,
            "cut": segments[-1].score if segments else None, "top": rows, "share": share}
