"""CSV and TSV (.csv, .tsv/.tab), optionally compressed: a header row names the columns; the
text column is the text and every other column is metadata (as strings: CSV has no types)."""

from __future__ import annotations

import csv
import sys
from typing import Iterator

from tapt.errors import InputError
from tapt.indexer.reading.formats.base import Format, InputFile, ReadOptions, Row, Scanned, register

# Documents can be far longer than the csv module's default field limit (128 KiB).
_FIELD_LIMIT = min(sys.maxsize, 2**31 - 1)


@register
class CsvFormat(Format):
    name = "csv"
    order = 30
    suffixes = (".csv",)
    compressible = True
    delimiter = ","
    summary = "comma-separated values with a header row; the text column is the text"
    title = "CSV"
    text = "the `--text-field` column"
    fields = "metadata (strings)"

    def _rows(self, file: InputFile, options: ReadOptions) -> Iterator[tuple[int, list[str], list[str]]]:
        """(line, header, row) of every non-empty data row, checked against the header."""
        if csv.field_size_limit() < _FIELD_LIMIT:
            csv.field_size_limit(_FIELD_LIMIT)
        reader = csv.reader((line for _, line in file.lines(options.invalid_utf8)),
                            delimiter=self.delimiter, strict=True)
        try:
            header = next(reader, None)
            if header is None:
                raise InputError(f"{file.name}: holds no text (no header row)")
            if options.text_field not in header:
                raise InputError(f"{file.name}: no column '{options.text_field}' in the header "
                                 f"(columns: {', '.join(header)})", param="text_field")
            if len(set(header)) != len(header):
                raise InputError(f"{file.name}:1: the header names a column twice")
            start = reader.line_num + 1
            for row in reader:
                line, start = start, reader.line_num + 1
                if not row:
                    continue
                if len(row) != len(header):
                    raise InputError(f"{file.name}:{line}: {len(row)} fields where the header "
                                     f"has {len(header)}")
                yield line, header, row
        except csv.Error as exc:
            raise InputError(f"{file.name}:{reader.line_num}: not valid "
                             f"{self.name.upper()} ({exc})") from exc

    def scan(self, file: InputFile, options: ReadOptions) -> Scanned:
        records = blank = 0
        column = None
        for _, header, row in self._rows(file, options):
            column = header.index(options.text_field) if column is None else column
            if row[column].strip():
                records += 1
            else:
                blank += 1
        return Scanned(records, blank)

    def rows(self, file: InputFile, options: ReadOptions) -> Iterator[Row]:
        for line, header, row in self._rows(file, options):
            meta = dict(zip(header, row))
            text = meta.pop(options.text_field)
            yield Row(f"{file.name}:{line}", text, meta)


@register
class TsvFormat(CsvFormat):
    name = "tsv"
    order = 31
    suffixes = (".tsv", ".tab")
    delimiter = "\t"
    summary = "tab-separated values with a header row; the text column is the text"
    title = "TSV"
