"""The columns of a selection's exports (`Selection.to_records`, `to_arrow`, `export`).

One row per segment: `text`, `weight` and `score` first, then tapt's provenance under names
that start with `tapt_` (`PROVENANCE`), then every corpus metadata field under its own name, as
a real column of its own type (in Arrow: the type pyarrow infers from the values; null where a
segment lacks the field). A corpus field whose name is taken (`text`, `weight`, `score` or
anything starting with `tapt_`) gets `corpus_` in front until it is free. A corpus field whose
values have no single Arrow type (an int in one row, a string in another) is JSON text in Arrow,
as is `tapt_sentence_meta` (each sentence's fields where they differ).
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from tapt.retriever.selections.file_format import SelectedSegment

FIRST = ("text", "weight", "score")
PROVENANCE = ("tapt_rank", "tapt_id", "tapt_doc", "tapt_row_start", "tapt_row_end",
              "tapt_doc_key", "tapt_source", "tapt_sentences", "tapt_sentence_meta",
              "tapt_method")
FIXED = FIRST + PROVENANCE
ID_COLUMN = "tapt_id"
# The columns of an export written before corpus fields became columns (still recognised).
OLD_COLUMNS = ("text", "weight", "score", "rank", "id", "doc", "row_start", "row_end", "doc_key",
               "source", "meta", "sentence_meta", "sentences", "method")
_JSON_COLUMNS = ("tapt_sentence_meta",)


def corpus_column(field: str) -> str:
    """The export column of a corpus metadata field.

    Args:
        field: The field's name in the corpus.

    Returns:
        The name itself, or `corpus_` + name (repeated) where tapt's columns take it.
    """
    name = field
    while name in FIRST or name.startswith("tapt_"):
        name = "corpus_" + name
    return name


def corpus_columns(segments: Sequence[SelectedSegment]) -> dict[str, str]:
    """Every corpus metadata field of the segments (first seen first) -> its column.

    Args:
        segments: The selected segments.

    Returns:
        Field name -> column name.
    """
    names: dict[str, None] = {}
    for seg in segments:
        names.update(dict.fromkeys(seg.meta))
    own = {key for key in names if corpus_column(key) == key}
    taken = set(FIXED) | own            # a field free under its own name keeps it
    fields = {}
    for key in names:
        column = key if key in own else corpus_column(key)
        while key not in own and column in taken:   # `corpus_x` in the corpus beside an `x`
            column = "corpus_" + column
        fields[key] = column
        taken.add(column)
    return fields


def records(segments: Sequence[SelectedSegment]) -> list[dict[str, Any]]:
    """One export row per segment, in rank order (the columns above; None where a segment
    lacks a corpus field).

    Args:
        segments: The selected segments.

    Returns:
        One dict per segment.
    """
    fields = corpus_columns(segments)
    out = []
    for s in segments:
        row = {"text": s.text, "weight": float(s.weight), "score": float(s.score),
               "tapt_rank": s.rank, "tapt_id": s.id, "tapt_doc": s.doc,
               "tapt_row_start": s.rows[0], "tapt_row_end": s.rows[1],
               "tapt_doc_key": s.doc_key, "tapt_source": s.source,
               "tapt_sentences": s.sentences, "tapt_sentence_meta": s.sentence_meta,
               "tapt_method": s.method}
        row.update({column: s.meta.get(key) for key, column in fields.items()})
        out.append(row)
    return out


def _fixed_type(pa: Any, name: str) -> Any:
    if name in ("weight", "score"):
        return pa.float64()
    if name in ("tapt_rank", "tapt_id", "tapt_doc", "tapt_row_start", "tapt_row_end"):
        return pa.int64()
    if name == "tapt_sentences":
        return pa.list_(pa.string())
    return pa.string()


def _writable(pa: Any, kind: Any) -> bool:
    """Whether Parquet can hold the type (not a struct without fields, at any depth)."""
    if pa.types.is_struct(kind):
        return kind.num_fields > 0 and all(_writable(pa, kind.field(i).type)
                                           for i in range(kind.num_fields))
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _writable(pa, kind.value_type)
    return True


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False)


def _corpus_array(pa: Any, values: list[Any]) -> Any:
    """The values as one typed Arrow array, or as JSON text where they have no one type."""
    try:
        array = pa.array(values)
        if _writable(pa, array.type):
            return array
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        pass
    return pa.array([_json(v) for v in values], type=pa.string())


def arrow_table(pa: Any, rows: list[dict[str, Any]], columns: Sequence[str]) -> Any:
    """The rows as a pyarrow Table with typed columns.

    Args:
        pa: The pyarrow module.
        rows: `records(...)`.
        columns: Every column, in order (`FIXED` then the corpus columns).

    Returns:
        pyarrow.Table.
    """
    arrays = {}
    for name in columns:
        values = [row[name] for row in rows]
        if name in _JSON_COLUMNS:
            arrays[name] = pa.array([_json(v) for v in values], type=pa.string())
        elif name in FIXED:
            arrays[name] = pa.array(values, type=_fixed_type(pa, name))
        else:
            arrays[name] = _corpus_array(pa, values)
    return pa.table(arrays)
