"""JSON Lines (.jsonl, .ndjson, .jl, and .json read as JSON Lines), optionally compressed: one
object per line with a string text field; every other field is metadata."""

from __future__ import annotations

import json
import re
from typing import Any, Iterator

from tapt.indexer.reading.formats import spans
from tapt.indexer.reading.formats.base import (
    Format,
    InputFile,
    LineError,
    ReadOptions,
    Row,
    Scanned,
    register,
)


@register
class JsonlFormat(Format):
    name = "jsonl"
    order = 10
    suffixes = (".jsonl", ".ndjson", ".jl", ".json")
    compressible = True
    summary = "JSON Lines: one object per line; the text field is the text, other fields metadata"
    title = "JSON Lines"
    text = "the `--text-field` field (a string)"
    fields = "metadata"

    def _objects(self, file: InputFile, options: ReadOptions) -> Iterator[tuple[int, dict[str, Any]]]:
        """(line number, object) of every record; a null text field is kept (a blank record,
        as a null in a table), lone UTF-16 surrogates escaped in the JSON become U+FFFD."""
        for lineno, line in file.lines(options.invalid_utf8):
            if not line.strip():
                continue
            yield lineno, _record(file, lineno, line, options)

    def scan(self, file: InputFile, options: ReadOptions) -> Scanned:
        records = blank = 0
        for _, obj in self._objects(file, options):
            if (obj[options.text_field] or "").strip():
                records += 1
            else:
                blank += 1
        return Scanned(records, blank)

    def rows(self, file: InputFile, options: ReadOptions) -> Iterator[Row]:
        if file.span is not None and options.doc_field:
            yield from self._piece_rows(file, options)
            return
        for lineno, obj in self._objects(file, options):
            text = obj.pop(options.text_field)
            yield Row(f"{file.name}:{lineno}", text, obj)

    def _piece_rows(self, file: InputFile, options: ReadOptions) -> Iterator[Row]:
        """A piece's records joined into documents as the whole file's are: the records it
        begins with that continue the document of the record before it are left to the piece
        before, and the records after its end that continue its last document are read on."""
        def key_of(obj: dict[str, Any]) -> Any:
            key = obj.get(options.doc_field)
            return None if key == "" else key

        def blank(obj: dict[str, Any]) -> bool:
            return not (obj.get(options.text_field) or "").strip()

        before = None
        for lineno, line in spans.lines_before(file):
            if line.strip():
                obj = _record(file, lineno, line, options)
                if not blank(obj):
                    before = key_of(obj)
                    break
        skipping, current = before is not None, None
        for lineno, line, owned in file.spanned_lines(options.invalid_utf8):
            if not line.strip():
                continue
            obj = _record(file, lineno, line, options)
            key, empty = key_of(obj), blank(obj)
            if not owned and (empty or (key is not None and key == current)):
                if not empty:
                    yield Row(f"{file.name}:{lineno}", obj.pop(options.text_field), obj)
                continue
            if not owned:
                return
            if skipping and (empty or (key is not None and key == before)):
                continue
            skipping = False
            if not empty:
                current = key
            yield Row(f"{file.name}:{lineno}", obj.pop(options.text_field), obj)


def _record(file: InputFile, lineno: int, line: str, options: ReadOptions) -> dict[str, Any]:
    """The object of one non-blank line, checked (see `JsonlFormat._objects`)."""
    try:
        obj = json.loads(line, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise LineError(file.name, lineno, f"not valid JSON ({exc.msg} at column {exc.colno})"
                        + _whole_json_hint(lineno, line)) from exc
    if not isinstance(obj, dict):
        raise LineError(file.name, lineno, "a JSONL record must be an object"
                        + _whole_json_hint(lineno, line))
    if "\\ud" in line or "\\uD" in line:      # cheap: only an escape can make one
        obj = _without_lone_surrogates(obj)
    text = obj.get(options.text_field, _MISSING)
    if text is _MISSING:
        fields = ", ".join(repr(k) for k in list(obj)[:12]) or "none"
        raise LineError(file.name, lineno, f"field '{options.text_field}' is missing (the "
                        f"record's fields: {fields}{', ...' if len(obj) > 12 else ''}); name the "
                        "one holding the text with `text_field`", param="text_field")
    if text is not None and not isinstance(text, str):
        raise LineError(file.name, lineno, f"field '{options.text_field}' is not a string (it "
                        f"holds {type(text).__name__}: {_short(text)})", param="text_field")
    return obj


_MISSING = object()


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + "..."


def _no_constant(name: str) -> None:
    """NaN, Infinity and -Infinity (JSON extensions Python accepts) read as null."""
    return None


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _without_lone_surrogates(value: Any) -> Any:
    """`value` with every lone surrogate in its strings (keys too) replaced by U+FFFD: JSON may
    escape one (`"\\ud800"`), UTF-8 cannot store it."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_without_lone_surrogates(k): _without_lone_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_lone_surrogates(v) for v in value]
    return value


def _whole_json_hint(lineno: int, line: str) -> str:
    """A file that is one JSON document (an array) rather than JSON Lines."""
    if lineno == 1 and line.lstrip().startswith("["):
        return " (JSON files are read as JSON Lines: one object per line, not an array)"
    return ""
