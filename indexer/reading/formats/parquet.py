"""Parquet (.parquet, .pq), streamed a row group at a time: the text column is the text and
every other column metadata (binary columns are not kept). The scan reads only the footer:
the schema is checked and the rows counted from it."""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Iterator

from tapt.errors import InputError
from tapt.indexer.reading.formats.base import (
    Format,
    InputFile,
    ReadOptions,
    Row,
    Scanned,
    check_text_column,
    register,
    table_rows,
)

log = logging.getLogger(__name__)
_BATCH = 1024


@contextlib.contextmanager
def _parquet(file: InputFile) -> Iterator[Any]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    with contextlib.ExitStack() as stack:
        where = str(file.source.local) if file.source.local else stack.enter_context(file.source.open())
        try:
            yield pq.ParquetFile(where, memory_map=file.source.local is not None)
        except InputError:
            raise
        except (pa.ArrowException, OSError) as exc:
            raise InputError(f"{file.name}: cannot read as Parquet ({exc})") from exc


@register
class ParquetFormat(Format):
    name = "parquet"
    order = 40
    suffixes = (".parquet", ".pq")
    summary = "Parquet, streamed by row group; the text column is the text, other columns metadata"
    title = "Parquet"
    packed = "inside the file"
    text = "the `--text-field` column (a string column)"
    fields = "metadata"

    def scan(self, file: InputFile, options: ReadOptions) -> Scanned:
        with _parquet(file) as pf:
            columns = check_text_column(file.name, pf.schema_arrow, options)
            rows = pf.metadata.num_rows
        dropped = sorted(set(pf.schema_arrow.names) - set(columns))
        if dropped:
            log.info("%s: binary columns not kept as metadata: %s", file.name, ", ".join(dropped))
        if rows == 0:       # exact: the reader refuses it alone, skips it in a folder
            return Scanned(0, exact=True, detail={"columns": columns})
        return Scanned(rows, exact=False, detail={"columns": columns})

    def rows(self, file: InputFile, options: ReadOptions) -> Iterator[Row]:
        with _parquet(file) as pf:
            yield from table_rows(file.name, pf.iter_batches(batch_size=_BATCH,
                                                             columns=file.scanned.detail["columns"]),
                                  options, file=file)
