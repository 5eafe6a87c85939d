"""Stream documents from plain-text and JSONL corpora (optionally gzipped, or directories of them).

Plain text: one document per line, or per blank-line block (`--text-docs`, auto-detected per file).
JSONL: one record per line with a string `text` field; other fields are kept as metadata.
Consecutive records with the same `doc` field value form one document (so a corpus that is already
split into sentences, one record each, keeps its documents); records without it are documents alone.
`scan_inputs` reads everything once up front, so a bad file fails before any embedding is paid for.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Literal

from tapt.errors import InputError

TEXT_SUFFIXES = (".txt", ".text")
JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
TextDocs = Literal["auto", "line", "block"]


@dataclass(frozen=True)
class Record:
    """One input record: its text and the metadata that travels with every sentence split from it."""

    text: str
    meta: dict[str, Any]


@dataclass
class Document:
    """Consecutive records of one document from one source file."""

    source: str
    key: str
    records: list[Record] = field(default_factory=list)


@dataclass(frozen=True)
class InputFile:
    path: Path
    kind: Literal["text", "jsonl"]
    text_docs: Literal["line", "block"]
    records: int


@dataclass(frozen=True)
class CorpusScan:
    """What `scan_inputs` found: the files in reading order and how many records they hold."""

    files: list[InputFile]
    skipped_blank: int

    @property
    def records(self) -> int:
        return sum(f.records for f in self.files)


def _kind(path: Path) -> Literal["text", "jsonl"] | None:
    name = path.name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    if name.endswith(JSONL_SUFFIXES):
        return "jsonl"
    if name.endswith(TEXT_SUFFIXES):
        return "text"
    return None


def expand_paths(paths: Iterable[str | Path]) -> list[Path]:
    """Files named directly (any name, read as text unless .jsonl) and corpus files under directories."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise InputError(f"{raw}: no such file or directory")
        if path.is_dir():
            found = []
            for root, dirs, files in os.walk(path):  # followlinks=False: no symlink loops
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in sorted(files):
                    child = Path(root) / name
                    if not name.startswith(".") and _kind(child) is not None and child.is_file():
                        found.append(child)
            if not found:
                raise InputError(f"{raw}: directory holds no .txt/.jsonl(.gz) files")
            out.extend(found)
        elif path.is_file():
            out.append(path)
        else:
            raise InputError(f"{raw}: not a regular file")
    if not out:
        raise InputError("no input files given")
    return out


def _open_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, decoded line without newline); clear errors for binary, bad UTF-8 and bad gzip."""
    try:
        with (gzip.open(path, "rb") if path.name.lower().endswith(".gz") else open(path, "rb")) as fh:
            if b"\x00" in fh.read(8192):
                raise InputError(f"{path}: a binary file (NUL bytes in its first 8 KB), not text")
            fh.seek(0)
            for lineno, line in enumerate(fh, 1):
                if b"\x00" in line:
                    raise InputError(f"{path}:{lineno}: contains NUL bytes (binary file?)")
                try:
                    text = line.decode("utf-8").rstrip("\r\n")
                except UnicodeDecodeError as exc:
                    raise InputError(
                        f"{path}:{lineno}: not valid UTF-8 (byte {exc.start}); re-encode the file"
                    ) from exc
                yield lineno, text.lstrip("\ufeff") if lineno == 1 else text
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(f"{path}: cannot read ({exc})") from exc


def _parse_jsonl(path: Path, lineno: int, line: str, text_field: str) -> Record | None:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from exc
    if not isinstance(obj, dict):
        raise InputError(f"{path}:{lineno}: a JSONL record must be an object")
    text = obj.get(text_field)
    if not isinstance(text, str):
        raise InputError(f"{path}:{lineno}: field '{text_field}' is missing or not a string")
    if not text.strip():
        return None
    meta = {k: v for k, v in obj.items() if k != text_field}
    return Record(text=text, meta=meta)


def _iter_file(
    inp: InputFile, text_field: str, doc_field: str | None
) -> Iterator[Document | None]:
    """Documents of one file; yields None for each skipped blank record (for counting)."""
    source = str(inp.path)
    if inp.kind == "jsonl":
        current: Document | None = None
        current_key: Any = None
        for lineno, line in _open_lines(inp.path):
            if not line.strip():
                continue
            rec = _parse_jsonl(inp.path, lineno, line, text_field)
            if rec is None:
                yield None
                continue
            key = rec.meta.get(doc_field) if doc_field else None
            if current is not None and key is not None and key == current_key:
                current.records.append(rec)
                continue
            if current is not None:
                yield current
            current = Document(source, str(key) if key is not None else f"{source}:{lineno}", [rec])
            current_key = key
        if current is not None:
            yield current
        return
    if inp.text_docs == "line":
        for lineno, line in _open_lines(inp.path):
            if line.strip():
                yield Document(source, f"{source}:{lineno}", [Record(line.strip(), {})])
        return
    block: list[str] = []
    start = 1
    for lineno, line in _open_lines(inp.path):
        if line.strip():
            if not block:
                start = lineno
            block.append(line.strip())
        elif block:
            yield Document(source, f"{source}:{start}", [Record(" ".join(block), {})])
            block = []
    if block:
        yield Document(source, f"{source}:{start}", [Record(" ".join(block), {})])


def scan_inputs(
    paths: Iterable[str | Path],
    text_field: str = "text",
    doc_field: str | None = "doc",
    text_docs: TextDocs = "auto",
) -> CorpusScan:
    """Validate every input file (decoding, JSON, text field) and count records, reading once."""
    files: list[InputFile] = []
    blank = 0
    for path in expand_paths(paths):
        kind = _kind(path) or "text"
        records = 0
        has_blank_between = False
        saw_text = False
        pending_blank = False
        for lineno, line in _open_lines(path):
            if kind == "jsonl":
                if not line.strip():
                    continue
                if _parse_jsonl(path, lineno, line, text_field) is None:
                    blank += 1
                else:
                    records += 1
            elif line.strip():
                records += 1
                if pending_blank and saw_text:
                    has_blank_between = True
                saw_text, pending_blank = True, False
            else:
                pending_blank = True
        if records == 0:
            raise InputError(f"{path}: holds no text")
        mode: Literal["line", "block"]
        if text_docs == "auto":
            mode = "block" if has_blank_between else "line"
        else:
            mode = text_docs
        files.append(InputFile(path, kind, mode, records))
    return CorpusScan(files, blank)


def iter_documents(
    scan: CorpusScan, text_field: str = "text", doc_field: str | None = "doc", skip: int = 0
) -> Iterator[Document]:
    """Stream the documents of a scanned corpus, in file order, after the first `skip` ones."""
    seen = 0
    for inp in scan.files:
        for doc in _iter_file(inp, text_field, doc_field):
            if doc is not None:
                seen += 1
                if seen > skip:
                    yield doc


def read_texts(
    paths: Iterable[str | Path], text_field: str = "text", text_docs: TextDocs = "auto"
) -> list[str]:
    """All record texts of small inputs (task files), each a document's text, in order."""
    scan = scan_inputs(paths, text_field=text_field, doc_field=None, text_docs=text_docs)
    return [rec.text for doc in iter_documents(scan, text_field, None) for rec in doc.records]
