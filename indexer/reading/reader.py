"""Read a corpus, a task or held-out text: inputs -> files -> records -> documents.

Inputs are files, folders (walked in sorted order; hidden entries ignored, files of no known
format skipped and reported, or refused with `strict`), fsspec URLs, Hugging Face datasets
(saved folders, Arrow files, `HubDataset` streams) and, for task text, "-" (standard input).
The same path given twice (or a file and a folder holding it) is read once, with a warning.
Each file is read by its format (`tapt.indexer.reading.formats`, chosen by suffix or `input_format`).

Records become documents the same way for every format: consecutive records with the same
`doc_field` value form one document (a corpus already split into sentences, one record each,
keeps its documents); records without it are documents alone; blank records are skipped and
counted. `scan_inputs` reads everything up front (the footer only for Parquet/Arrow), so a bad
file fails with its file:line or file:row before any embedding is paid for.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Union

from tqdm.auto import tqdm

from tapt.errors import InputError
from tapt.indexer.reading import formats
from tapt.indexer.reading.formats import HubDataset, InputFile, InvalidUtf8, ReadOptions, TextDocs
from tapt.indexer.reading.formats.sources import (
    HubSource,
    Source,
    StdinSource,
    compression_of,
    glob_matches,
    source_of,
)
from tapt.indexer.reading.splitter import SentenceSplitter
from tapt.util.checks import path_text
from tapt.util.safety import INDEX_MANIFEST, is_tapt_index

log = logging.getLogger(__name__)

InputSpec = Union[str, Path, HubDataset]
_LISTED = 20

__all__ = ["Record", "Document", "CorpusScan", "TextInput", "HubDataset", "TextDocs",
           "expand_inputs", "scan_inputs", "iter_documents", "read_text"]


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


@dataclass
class CorpusScan:
    """What `scan_inputs` found: the files in reading order, what they hold, how to read them;
    `pieces`, what is read apart (each file, or the byte ranges of a large line file:
    `formats.spans`), in the same order."""

    files: list[InputFile]
    options: ReadOptions
    pieces: list[InputFile] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.pieces:
            self.pieces = list(self.files)

    @property
    def records(self) -> int | None:
        """Records holding text (None when a streamed input does not say)."""
        counts = [f.scanned.records for f in self.files]
        return None if any(c is None for c in counts) else sum(counts)

    @property
    def skipped_blank(self) -> int:
        """Blank records skipped; for Parquet/Arrow/HF inputs, those met so far while reading."""
        return sum(f.scanned.blank if f.scanned.exact else f.blank_read for f in self.files)

    @property
    def invalid_utf8_records(self) -> int:
        """Lines or rows read so far whose invalid UTF-8 became U+FFFD (`invalid_utf8`)."""
        return sum(f.invalid_utf8_read for f in self.files)

    def identity(self) -> list[Any]:
        """What changes when an input changes (a changed input forbids resuming a build)."""
        return [f.source.identity() for f in self.files]

    def manifest_files(self) -> list[dict[str, Any]]:
        """Each input file with its format, as a build manifest records it."""
        return [{"path": f.name, "format": f.format.name, "compression": f.compression,
                 "records": f.scanned.records} for f in self.files]


def _format_for(source: Source, options: ReadOptions) -> tuple[formats.Format, str | None] | None:
    """The reader of one file: forced by `input_format`, else by its suffix (None: unknown)."""
    if options.input_format is None:
        return formats.by_name(source.basename)
    fmt = formats.get(options.input_format)
    if fmt.folder:
        raise InputError(f"{source.name}: the {fmt.name} format reads a folder, not a file",
                         param="input_format")
    _, compression = compression_of(source.basename)
    if compression and not fmt.compressible:
        raise InputError(f"{source.name}: {fmt.name} files are not read {compression}-compressed",
                         param="input_format")
    return fmt, compression


def _folder(root: Source, options: ReadOptions) -> list[InputFile]:
    """The corpus files under a folder, in sorted order; reports (or refuses) the others."""
    found: list[InputFile] = []
    skipped: list[str] = []

    def visit(folder: Source) -> None:
        entries = list(folder.entries())
        if folder.local is not None and any(name == INDEX_MANIFEST for name, _ in entries) \
                and is_tapt_index(folder.local):
            raise InputError(f"{folder.name}: is a tapt index, not corpus text; name the "
                             "corpus files or folders instead")
        for name, kind in entries:
            if name.startswith((".", "_")):   # hidden, and Hadoop/Spark's _SUCCESS, _logs...
                continue
            child = folder.child(name)
            if kind == "dir":
                fmt = formats.folder_format(child)
                if fmt is not None:
                    found.append(InputFile(child, fmt))
                else:
                    visit(child)
            elif kind == "file":
                chosen = _format_for(child, options)
                if chosen is None:
                    skipped.append(child.name)
                else:
                    found.append(InputFile(child, *chosen, in_folder=True))
            else:
                skipped.append(f"{child.name} (not a regular file)")

    visit(root)
    if skipped:
        listed = ", ".join(skipped[:_LISTED]) + (
            f" and {len(skipped) - _LISTED} more" if len(skipped) > _LISTED else "")
        if options.strict:
            entries = "1 entry is" if len(skipped) == 1 else f"{len(skipped)} entries are"
            raise InputError(f"{root.name}: {entries} not corpus files (no known "
                             f"format, or not a regular file): {listed} (known formats: "
                             f"{formats.known()}); remove them, or drop `strict` to skip them")
        log.info("%s: skipped %s not corpus files (no known format, or not a regular "
                 "file): %s", root.name,
                 "1 entry that is" if len(skipped) == 1 else f"{len(skipped)} entries that are",
                 listed)
    if not found:
        raise InputError(f"{root.name}: folder holds no corpus files (known formats: "
                         f"{formats.known()})")
    return found


def _stdin(options: ReadOptions) -> InputFile:
    """Standard input, read whole: JSONL if its first non-blank line is a JSON object, else
    plain text (or the forced `input_format`)."""
    data = sys.stdin.buffer.read()
    if options.input_format is not None:
        return InputFile(StdinSource(data), formats.get(options.input_format))
    first = next((line for line in data.split(b"\n") if line.strip()), b"")
    try:
        is_json = isinstance(json.loads(first), dict)
    except (json.JSONDecodeError, UnicodeDecodeError):
        is_json = False
    return InputFile(StdinSource(data), formats.get("jsonl" if is_json else "text"))


def _unknown_format(source: Source, allow_stdin: bool, choose_format: bool) -> InputError:
    """The error for a file of no known suffix, naming only fixes the caller offers."""
    fixes = ["pass `input_format` to choose a reader"] if choose_format else []
    fixes.append("give the file the suffix of its format")
    if allow_stdin:
        fixes.append("give its text on standard input as - (read as JSON Lines when its first "
                     "line is a JSON object, else as plain text)")
    return InputError(f"{source.name}: unknown format (known: {formats.known()}); "
                      + ", or ".join(fixes))


def expand_inputs(inputs: InputSpec | Iterable[InputSpec], options: ReadOptions | None = None,
                  allow_stdin: bool = False, choose_format: bool = True) -> list[InputFile]:
    """The files to read, in order, each with its format; each distinct input once.

    Args:
        inputs: Paths (files or folders), fsspec URLs, HubDataset specs, and "-" (standard
            input) where `allow_stdin`.
        options: How to read them (`input_format`, `strict`).
        allow_stdin: Accept "-" (task text; a corpus is read twice, so it must be a file).
        choose_format: The caller offers `input_format` (index build and add do; the commands
            that read a task or held-out text do not): the error for an unknown suffix names
            it only then.

    Returns:
        The input files, not yet scanned.
    """
    options = options or ReadOptions()
    if isinstance(inputs, (str, Path, HubDataset)):
        inputs = [inputs]
    specs: list[InputSpec] = []
    for raw in inputs:              # a glob pattern stands for the files it matches
        if isinstance(raw, str):
            path_text(raw, None)
        matches = glob_matches(raw) if not (isinstance(raw, str) and raw == "-") else None
        specs.extend(matches if matches is not None else [raw])
    found: list[InputFile] = []
    for raw in specs:
        if isinstance(raw, str) and raw == "-":
            if not allow_stdin:
                raise InputError("-: standard input can give task text, not a corpus (a corpus "
                                 "is read twice); write it to a file")
            if any(f.source.key == "-" for f in found):
                log.warning("- (standard input) is given more than once: read once")
                continue
            found.append(_stdin(options))
            continue
        source = source_of(raw)
        if isinstance(source, HubSource):
            found.append(InputFile(source, formats.get("hf-hub")))
            continue
        try:
            exists = source.exists()
            is_dir = exists and source.is_dir()
        except OSError as exc:          # a name too long, a permission denied on the way...
            raise InputError(f"{str(raw)[:200]}: cannot be opened "
                             f"({exc.strerror or type(exc).__name__})") from None
        if not exists:
            raise InputError(f"{raw}: does not exist" + (
                "" if source.local is not None else " (or cannot be reached)"))
        if is_dir:
            forced = formats.get(options.input_format) if options.input_format else None
            fmt = forced if forced is not None and forced.folder else formats.folder_format(source)
            found.extend([InputFile(source, fmt)] if fmt is not None else _folder(source, options))
        elif source.local is not None and not source.local.is_file():
            raise InputError(f"{raw}: not a regular file")
        else:
            chosen = _format_for(source, options)
            if chosen is None:
                raise _unknown_format(source, allow_stdin, choose_format)
            found.append(InputFile(source, *chosen))
    unique: dict[str, InputFile] = {}
    for f in found:
        if f.source.key in unique:
            first = unique[f.source.key].name
            log.warning("%s is given more than once%s: read once", f.name,
                        f" (also as {first})" if first != f.name else "")
        else:
            unique[f.source.key] = f
    if not unique:
        raise InputError("no input files given")
    return list(unique.values())


def scan_inputs(
    inputs: InputSpec | Iterable[InputSpec],
    text_field: str = "text",
    doc_field: str | None = "doc",
    text_docs: TextDocs = "auto",
    *,
    input_format: str | None = None,
    hf_split: str | None = None,
    strict: bool = False,
    invalid_utf8: InvalidUtf8 = "error",
    allow_stdin: bool = False,
    progress: bool = False,
    choose_format: bool = True,
) -> CorpusScan:
    """Find, validate and count every input file before anything is embedded.

    Args:
        inputs: Paths, folders, URLs or HubDataset specs (see `expand_inputs`).
        text_field: Field/column with the text.
        doc_field: Field/column joining consecutive records into documents (None: none).
        text_docs: Plain text: a document per line, per blank-line block, or auto.
        input_format: Read every file as this format instead of by its suffix.
        hf_split: The split of a DatasetDict folder or a Hub dataset.
        strict: Refuse folders holding files of no known format.
        invalid_utf8: "error" refuses text that is not valid UTF-8 (with its file and line);
            "replace" reads each invalid byte as U+FFFD (counted: `invalid_utf8_records`).
        allow_stdin: Accept "-" (standard input).
        progress: A progress bar over the files.
        choose_format: The caller offers `input_format` (see `expand_inputs`).

    Returns:
        The scan to pass to `iter_documents`.
    """
    options = ReadOptions(text_field, doc_field, text_docs, input_format, hf_split, strict,
                          invalid_utf8)
    files = expand_inputs(inputs, options, allow_stdin, choose_format)
    for f in tqdm(files, desc="scanning", unit="file", disable=not progress or len(files) < 2,
                  dynamic_ncols=True):
        f.scanned = f.format.scan(f, options)
    return without_empty(CorpusScan(files, options))


def without_empty(scan: CorpusScan) -> CorpusScan:
    """A scan without the files of folders that hold no text (an empty partition of a folder of
    shards: skipped with a warning); a file given by itself that holds none is refused."""
    empty: list[str] = []
    for f in scan.files:
        if f.scanned.exact and f.scanned.records == 0:
            if not f.in_folder:
                raise InputError(f"{f.name}: holds no text")
            empty.append(f.name)
    if not empty:
        return scan
    skipped = set(empty)
    kept = [f for f in scan.files if f.name not in skipped]
    if not kept:
        raise InputError(f"{empty[0]}: holds no text"
                         + (f" (nor do the {len(empty) - 1} other files)" if len(empty) > 1
                            else ""))
    log.warning("skipped %d file(s) in folders that hold no text: %s", len(empty),
                ", ".join(empty[:_LISTED]) + (" ..." if len(empty) > _LISTED else ""))
    return CorpusScan(kept, scan.options, [p for p in scan.pieces if p.name not in skipped])


def checked_text(where: str, text: str, f: InputFile | None,
                 invalid_utf8: InvalidUtf8 = "error") -> str:
    """A record's text as tapt stores it: a NUL character (U+0000: from a JSON escape, a
    Parquet or Arrow string, a dataset) is what the line readers refuse as a NUL byte, so it is
    refused with the record's place, or with `invalid_utf8="replace"` read as U+FFFD (the
    record counted with those whose invalid UTF-8 was replaced). Every format's records pass
    here, so an index never holds text that tapt would refuse as a task.

    Args:
        where: The record's place for messages ("file:LINE", "file:row N").
        text: The record's text.
        f: The file it came from (its `invalid_utf8_read` counts a replaced record).
        invalid_utf8: "error" or "replace".

    Returns:
        The text, NUL characters replaced where asked.

    Raises:
        InputError: the text holds a NUL character and `invalid_utf8` is "error".
    """
    if "\x00" not in text:
        return text
    if invalid_utf8 != "replace":
        raise InputError(f"{where}: contains NUL (U+0000) in its text, which tapt never "
                         "stores; remove it (index build and add can read it as U+FFFD: "
                         "--invalid-utf8 replace)")
    if f is not None:
        f.invalid_utf8_read += 1
    return text.replace("\x00", "\ufffd")


def _documents(f: InputFile, options: ReadOptions) -> Iterator[Document]:
    f.blank_read = f.invalid_utf8_read = 0
    current: Document | None = None
    current_key: Any = None
    for row in f.format.rows(f, options):
        if row.text is None or not row.text.strip():
            f.blank_read += 1
            continue
        row = row._replace(text=checked_text(row.where, row.text, f, options.invalid_utf8))
        key = row.meta.get(options.doc_field) if options.doc_field else None
        if key == "":
            key = None
        record = Record(row.text, row.meta)
        if current is not None and key is not None and key == current_key:
            current.records.append(record)
            continue
        if current is not None:
            yield current
        current = Document(f.name, str(key) if key is not None else row.where, [record])
        current_key = key
    if current is not None:
        yield current


def iter_documents(scan: CorpusScan, skip: int = 0) -> Iterator[Document]:
    """Stream the documents of a scanned corpus, in file order, after the first `skip` ones."""
    seen = 0
    for f in scan.files:
        for doc in _documents(f, scan.options):
            seen += 1
            if seen > skip:
                yield doc


@dataclass(frozen=True)
class TextInput:
    """Small text read whole (a task, held-out text), split into sentences.

    Attributes:
        files: Every file read, in order (paths, URLs, "<stdin>").
        file_sha256: SHA-256 of each file's bytes.
        sha256: One SHA-256 over all the files' bytes, in order.
        documents: Each document's sentences.
    """

    files: list[str]
    file_sha256: list[str]
    sha256: str
    documents: list[list[str]]

    @property
    def sentences(self) -> list[str]:
        return [s for doc in self.documents for s in doc]


def read_text(inputs: InputSpec | Iterable[InputSpec], split: bool = True, *,
              text_field: str = "text", doc_field: str | None = "doc",
              text_docs: TextDocs = "auto", input_format: str | None = None,
              hf_split: str | None = None, what: str = "the text",
              choose_format: bool = False) -> TextInput:
    """Read task or held-out text with the corpus readers and split it as the corpus is split.

    Args:
        inputs: Paths, folders, URLs, HubDataset specs, or "-" for standard input.
        split: Split records into sentences (pysbd), as an index built with `split`.
        text_field, doc_field, text_docs, input_format, hf_split: As for `scan_inputs`.
        what: How messages name the text ("the task").
        choose_format: The caller offers `input_format` to its user (the commands that read a
            task or held-out text do not: an unknown suffix's error then names the fixes they
            have, a suffix or standard input).

    Returns:
        The documents as sentence lists, with the files' hashes.
    """
    scan = scan_inputs(inputs, text_field, doc_field, text_docs, input_format=input_format,
                       hf_split=hf_split, allow_stdin=True, choose_format=choose_format)
    splitter = SentenceSplitter(split=split)
    documents = []
    for doc in iter_documents(scan):
        sentences = [s for rec in doc.records for s in splitter(rec.text)]
        if sentences:
            documents.append(sentences)
    if not documents:
        raise InputError(f"{what} holds no sentences")
    combined = hashlib.sha256()
    hashes = []
    for f in scan.files:
        one = hashlib.sha256()
        f.source.digest(one, combined)
        hashes.append(one.hexdigest())
    return TextInput([f.name for f in scan.files], hashes, combined.hexdigest(), documents)
