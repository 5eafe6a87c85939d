"""The reader interface: one `Format` per corpus format, each in its own module, the
`InputFile` a format reads, and the registry of formats by name and suffix.

A format turns one input (a file, or a folder for a saved Hugging Face dataset) into `Row`s:
(where, text, metadata). Everything above the rows - blank records, joining consecutive records
of one document, sentence splitting - is shared (`tapt.indexer.reading.reader`), so every format gives
the same documents for the same records.

Each format is read twice: `scan` first, for the whole corpus before anything is embedded (it
validates and counts, so a bad file fails with its file:line or file:row before any embedding is
paid for), then `rows` while the corpus is embedded. Line formats are validated completely by
their scan; columnar formats (Parquet, Arrow) check their schema and count rows from metadata,
so their scan costs no pass over the data.
"""

from __future__ import annotations

import base64
import bz2
import contextlib
import datetime
import decimal
import gzip
import io
import lzma
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, BinaryIO, ClassVar, Iterator, Literal, Mapping, NamedTuple, TypeVar

from tapt.errors import InputError
from tapt.indexer.reading.formats.sources import (
    COMPRESSIONS,
    MAX_LINE_BYTES,
    SNIFF_BYTES,
    Source,
    ZstdReader,
    compression_of,
    invalid_utf8_message,
    looks_binary,
    read_errors,
)
from tapt.util.registry import Registry

TextDocs = Literal["auto", "line", "block"]
TEXT_DOCS = ("auto", "line", "block")
InvalidUtf8 = Literal["error", "replace"]
INVALID_UTF8 = ("error", "replace")


@dataclass(frozen=True)
class ReadOptions:
    """How inputs are read (the same for every file of one read).

    Attributes:
        text_field: Field (JSONL) or column (Parquet, CSV/TSV, Arrow, HF datasets) with the text.
        doc_field: Field/column whose equal values on consecutive records join them into one
            document; None: every record is a document of its own.
        text_docs: Plain text: one document per line, per blank-line block, or auto-detected.
        input_format: Read every file as this format (by name) instead of by its extension.
        hf_split: The split of a saved DatasetDict folder or of a Hub dataset.
        strict: Refuse a folder that holds files of no known format instead of skipping them.
        invalid_utf8: Text that is not valid UTF-8: "error" refuses it with its file and line
            (or row); "replace" reads each invalid byte as U+FFFD and counts the records.
    """

    text_field: str = "text"
    doc_field: str | None = "doc"
    text_docs: TextDocs = "auto"
    input_format: str | None = None
    hf_split: str | None = None
    strict: bool = False
    invalid_utf8: InvalidUtf8 = "error"

    def __post_init__(self) -> None:
        if not isinstance(self.text_field, str) or not self.text_field:
            raise InputError("must name a field or column", param="text_field")
        if self.text_docs not in TEXT_DOCS:
            raise InputError(f"must be one of {', '.join(TEXT_DOCS)}, got {self.text_docs!r}",
                             param="text_docs")
        if self.invalid_utf8 not in INVALID_UTF8:
            raise InputError(f"must be one of {', '.join(INVALID_UTF8)}, got "
                             f"{self.invalid_utf8!r}", param="invalid_utf8")
        if self.doc_field == "":
            object.__setattr__(self, "doc_field", None)
        if self.input_format is not None:
            get(self.input_format)


class Row(NamedTuple):
    """One record as a format reads it.

    `where` locates it for error messages and is its document's key when it has no `doc_field`
    value ("file:LINE" for line formats, "file:row N" for tables). `text` None or blank: a blank
    record (skipped and counted).
    """

    where: str
    text: str | None
    meta: dict[str, Any]


@dataclass(frozen=True)
class Scanned:
    """What a format's scan found in one input.

    Attributes:
        records: Records that hold text (None: unknown until read, e.g. a streamed Hub dataset).
        blank: Blank records found (exact only when `exact`).
        exact: True when the scan read every record; False when it counted from metadata, in
            which case blank records are counted while the file is read.
        detail: What the scan decided that reading needs (the text format's document mode).
    """

    records: int | None
    blank: int = 0
    exact: bool = True
    detail: Mapping[str, Any] = field(default_factory=dict)


class Format(ABC):
    """One corpus format. Subclass, fill in the class attributes, implement `scan` and `rows`,
    and decorate the class with `register` (`tapt.extend.register_format`).

    Attributes:
        name: The format's name (`input_format` values, manifests, messages).
        suffixes: File name endings it is chosen by (lower case, after any compression suffix).
        compressible: Whether .gz/.zst/.bz2/.xz versions of its files are read.
        folder: Whether it reads a directory (recognised by `detect`) rather than a file.
        summary: One line for `--help` and the docs.
        order: Position in listings and messages (then by name).
        title: Its name in the docs' table of formats (default: `name`).
        source: That table's Extensions cell where `suffixes` do not say it (a folder).
        packed: Its Compressed cell where the format is not `compressible` ("inside the
            file": compressed by its own layout; default "no").
        text: Its Text cell: where a record's text is (default: `summary`).
        fields: Its Other fields cell: what the other fields become (default "none").
        options: The reading settings that only this format reads (the two Hugging Face
            formats share `hf_split`): fields of `ReadOptions`, typed and documented as
            fields of `BuildConfig` (keywords of `Index.build`, flags of `tapt index build`,
            `-` for `_`); the docs' table of formats lists them. The other fields of
            `ReadOptions` apply to every format.
    """

    name: ClassVar[str]
    suffixes: ClassVar[tuple[str, ...]] = ()
    compressible: ClassVar[bool] = False
    folder: ClassVar[bool] = False
    summary: ClassVar[str] = ""
    order: ClassVar[int] = 100
    title: ClassVar[str] = ""
    source: ClassVar[str] = ""
    packed: ClassVar[str] = "no"
    text: ClassVar[str] = ""
    fields: ClassVar[str] = "none"
    options: ClassVar[tuple[str, ...]] = ()

    def detect(self, source: Source) -> bool:
        """Folder formats: whether this directory is one of theirs."""
        return False

    @abstractmethod
    def scan(self, file: InputFile, options: ReadOptions) -> Scanned:
        """Validate and count one input; raise InputError naming file:line / file:row."""

    @abstractmethod
    def rows(self, file: InputFile, options: ReadOptions) -> Iterator[Row]:
        """Stream the input's records, in order (called after `scan`, with its `file.scanned`)."""

    def combine(self, scans: list[Scanned], options: ReadOptions) -> Scanned:
        """The scan of a file read in pieces (`spans`: line formats), from its pieces' scans,
        in order."""
        return Scanned(sum(s.records or 0 for s in scans), sum(s.blank for s in scans),
                       detail=scans[0].detail if scans else {})


def json_safe(value: Any) -> tuple[bool, Any]:
    """(keep, value as JSON can store it): dates and times become ISO strings, decimals strings,
    bytes base64, NumPy values lists/numbers; anything else (an image object) is not kept."""
    if isinstance(value, float) and not math.isfinite(value):
        return True, None            # JSON has no NaN or infinity: null, as pandas writes them
    if value is None or isinstance(value, (str, bool, int, float)):
        return True, value
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            keep, v = json_safe(v)
            if keep:
                out[str(k)] = v
        return True, out
    if isinstance(value, (list, tuple)):
        return True, [json_safe(v)[1] for v in value]
    if isinstance(value, (datetime.date, datetime.time)):
        return True, value.isoformat()
    if isinstance(value, datetime.timedelta):
        return True, value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return True, str(value)
    if isinstance(value, (bytes, bytearray)):
        return True, base64.b64encode(value).decode("ascii")
    if hasattr(value, "tolist"):  # NumPy arrays and scalars
        return json_safe(value.tolist())
    return False, None


def table_rows(name: str, batches: Iterator[Any], options: ReadOptions, start: int = 1,
               file: "InputFile | None" = None) -> Iterator[Row]:
    """Rows of Arrow record batches (Parquet, Arrow IPC, saved HF datasets): the text column's
    value and every other column as metadata, rows numbered from `start`. Records whose
    invalid UTF-8 was replaced (`options.invalid_utf8`) are counted in `file.invalid_utf8_read`.
    """
    from pyarrow import types as pa_types

    number = start
    for batch in batches:
        repaired: set[int] = set()
        columns = {n: _python_values(batch.column(i), name, number, n, options, repaired)
                   for i, n in enumerate(batch.schema.names)}
        if file is not None:
            file.invalid_utf8_read += len(repaired)
        texts = columns.pop(options.text_field)
        for n in columns:            # NaN and infinities: null (JSON has neither)
            if pa_types.is_floating(batch.schema.field(n).type):
                columns[n] = [v if v is None or math.isfinite(v) else None for v in columns[n]]
        simple = all(_is_plain(batch.schema.field(n).type) for n in columns)
        for i, text in enumerate(texts):
            if simple:
                meta = {n: values[i] for n, values in columns.items()}
            else:
                meta = {}
                for n, values in columns.items():
                    keep, v = json_safe(values[i])
                    if keep:
                        meta[n] = v
            yield Row(f"{name}:row {number}", text, meta)
            number += 1


def _python_values(column: Any, file: str, first: int, name: str, options: ReadOptions,
                   repaired: set[int]) -> list[Any]:
    """An Arrow column's values as Python objects (`first`: the file's row number of the first
    value). Strings that are not valid UTF-8 (Parquet does not check) are refused with their
    row, or read with U+FFFD for each invalid byte, their positions added to `repaired`."""
    try:
        return column.to_pylist()
    except UnicodeDecodeError as exc:
        failure = exc
    import pyarrow as pa

    plain = column.dictionary_decode() if pa.types.is_dictionary(column.type) else column
    try:
        raw = plain.cast(pa.large_binary()).to_pylist()
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):    # strings inside lists, structs
        raise InputError(f"{file}:rows {first}-{first + len(column) - 1}: column '{name}' holds "
                         f"text that is not valid UTF-8 inside {plain.type} values; re-encode "
                         "the file as UTF-8") from failure
    values: list[Any] = []
    for i, value in enumerate(raw):
        if value is None:
            values.append(None)
            continue
        try:
            values.append(value.decode("utf-8"))
        except UnicodeDecodeError as exc:
            if options.invalid_utf8 != "replace":
                raise InputError(f"{file}:row {first + i}: column '{name}' is "
                                 f"{invalid_utf8_message(exc)}") from exc
            values.append(value.decode("utf-8", errors="replace"))
            repaired.add(i)
    return values


def _is_plain(arrow_type: Any) -> bool:
    """Arrow types whose Python values JSON stores as they are."""
    import pyarrow as pa

    t = pa.types
    return (t.is_string(arrow_type) or t.is_large_string(arrow_type) or t.is_integer(arrow_type)
            or t.is_floating(arrow_type) or t.is_boolean(arrow_type) or t.is_null(arrow_type)
            or (hasattr(t, "is_string_view") and t.is_string_view(arrow_type)))


def check_text_column(name: str, schema: Any, options: ReadOptions) -> list[str]:
    """The columns to read from an Arrow schema (binary columns are not kept as metadata);
    refuses a schema without a string text column."""
    import pyarrow as pa

    names = list(schema.names)
    if options.text_field not in names:
        raise InputError(f"{name}: no column '{options.text_field}' (columns: "
                         f"{', '.join(names) or 'none'})", param="text_field")
    kind = schema.field(options.text_field).type
    if pa.types.is_dictionary(kind):      # a categorical column: its values are read decoded
        kind = kind.value_type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)
            or (hasattr(pa.types, "is_string_view") and pa.types.is_string_view(kind))):
        raise InputError(f"{name}: column '{options.text_field}' holds {kind}, not text (cast "
                         "it to string, or name the text column)", param="text_field")
    return [n for n in names if n == options.text_field or not (
        pa.types.is_binary(schema.field(n).type) or pa.types.is_large_binary(schema.field(n).type)
        or pa.types.is_fixed_size_binary(schema.field(n).type))]


@dataclass(eq=False)
class InputFile:
    """One input to read: where it is, its format and compression, and what its scan found.

    A large uncompressed line file may be read as pieces (`spans.split`): each a copy with a
    `span` of bytes [start, end) whose lines (those that begin inside it) it reads, numbered
    from `first_line` + 1."""

    source: Source
    format: Format
    compression: str | None = None
    scanned: Scanned | None = None
    blank_read: int = 0  # blank records met while reading (formats whose scan is not exact)
    invalid_utf8_read: int = 0  # lines or rows whose invalid UTF-8 was replaced while reading
    in_folder: bool = False  # found by walking a folder (an empty one is skipped, not refused)
    span: tuple[int, int] | None = None
    first_line: int = 0
    lines_read: int = 0  # lines read that are its own (a piece's: those that begin inside it)

    @property
    def name(self) -> str:
        return self.source.name

    @contextlib.contextmanager
    def open(self) -> Iterator[BinaryIO]:
        """The decompressed bytes; damaged compression or I/O errors become InputError."""
        with contextlib.ExitStack() as stack:
            raw = stack.enter_context(self.source.open())
            if self.compression == "gzip":
                fh: BinaryIO = stack.enter_context(gzip.GzipFile(fileobj=raw, mode="rb"))
            elif self.compression == "bz2":
                fh = stack.enter_context(bz2.BZ2File(raw))
            elif self.compression == "xz":
                fh = stack.enter_context(lzma.LZMAFile(raw))
            elif self.compression == "zstd":
                fh = stack.enter_context(io.BufferedReader(ZstdReader(raw), 1 << 20))
            else:
                fh = raw
            try:
                yield fh
            except InputError:
                raise
            except read_errors() as exc:
                raise InputError(f"{self.name}: cannot read ({exc})") from exc

    def lines(self, invalid_utf8: str = "error") -> Iterator[tuple[int, str]]:
        """(line number, decoded line with its line ending). A binary file (NUL bytes in its
        first 8 KB) is refused; a BOM is dropped. A NUL byte further on and invalid UTF-8 are
        refused with the file and line, or with `invalid_utf8="replace"` become U+FFFD (each
        such line counted in `invalid_utf8_read`). A line longer than MAX_LINE_BYTES (a file
        of one huge line, or a small compressed file that expands to one) is refused with its
        number and the limit before it is held in memory. A piece (`span`) gives the lines that
        begin inside it."""
        for lineno, text, owned in self.spanned_lines(invalid_utf8):
            if not owned:
                return
            yield lineno, text

    def spanned_lines(self, invalid_utf8: str = "error") -> Iterator[tuple[int, str, bool]]:
        """`lines` with whether each line begins inside the piece (`owned`); past a piece's
        end the lines that follow come too, unowned (read only as the consumer asks: the end of
        a document that began inside it), their replaced bytes not counted."""
        from tapt.indexer.reading.formats import spans

        self.lines_read = 0
        if self.span is not None:
            for lineno, raw, owned in spans.raw_lines(self):
                self.lines_read += owned
                yield lineno, self._decode(raw, lineno, invalid_utf8, owned), owned
            return
        with self.open() as fh:
            head = fh.read(SNIFF_BYTES)
            if b"\x00" in head and looks_binary(head):
                raise InputError(f"{self.name}: a binary file (NUL bytes in its first 8 KB), "
                                 "not text")
            parts = head.split(b"\n")
            first = [p + b"\n" for p in parts[:-1]]
            tail = parts[-1] + (fh.readline(MAX_LINE_BYTES) if parts[-1] or not first else b"")
            lineno = self.first_line
            rest = iter(lambda: fh.readline(MAX_LINE_BYTES + 1), b"")
            for raw in _chain(first, [tail] if tail else [], rest):
                lineno += 1
                self.lines_read += 1
                yield lineno, self._decode(raw, lineno, invalid_utf8, True), True

    def _decode(self, raw: bytes, lineno: int, invalid_utf8: str, counted: bool) -> str:
        """One line's text (see `lines`); `counted`: a replaced line counts in
        `invalid_utf8_read`."""
        if len(raw) > MAX_LINE_BYTES:
            raise LineError(self.name, lineno, f"a line longer than {MAX_LINE_BYTES >> 20} MiB, "
                            "the most tapt reads as one record (a file of one huge line, or a "
                            "compressed file that expands to one?); split it into lines or "
                            "records")
        replaced = b"\x00" in raw
        if replaced:
            if invalid_utf8 != "replace":
                raise LineError(self.name, lineno, "contains NUL bytes (a binary file?); remove "
                                "them (index build and add can read them as U+FFFD: "
                                "--invalid-utf8 replace)")
            raw = raw.replace(b"\x00", "\ufffd".encode())
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            if invalid_utf8 != "replace":
                raise LineError(self.name, lineno, invalid_utf8_message(exc)) from exc
            text = raw.decode("utf-8", errors="replace")
            replaced = True
        if counted:
            self.invalid_utf8_read += replaced
        return text.lstrip("\ufeff") if lineno == 1 else text


class LineError(InputError):
    """An InputError at one line of a file (`FILE:LINE: what`). A piece scanned apart numbers its
    lines from its own start (`first_line` 0): `moved` gives the error at the file's numbering
    once the lines of the pieces before it are known."""

    def __init__(self, name: str, lineno: int, what: str, param: str | None = None) -> None:
        super().__init__(f"{name}:{lineno}: {what}", param=param)
        self.name, self.lineno, self.what = name, int(lineno), what

    def moved(self, lines_before: int) -> "LineError":
        return LineError(self.name, self.lineno + lines_before, self.what, param=self.param)

    def __reduce__(self):   # pickled across processes with its parts
        return (LineError, (self.name, self.lineno, self.what, self.param))


def _chain(*iterables: Any) -> Iterator[bytes]:
    for it in iterables:
        yield from it


FORMATS: Registry[Format] = Registry("format", __name__.rpartition(".")[0],
                                     ("base", "sources", "spans"))
F = TypeVar("F", bound=type[Format])


def register(cls: F) -> F:
    """Class decorator: make a Format available by its name and suffixes.

    Args:
        cls: The `Format` subclass.

    Returns:
        The class, unchanged.

    Raises:
        ValueError: the name is taken, or another format claims one of its suffixes.
    """
    fmt = cls()
    for other in FORMATS.by_name.values():
        shared = set(fmt.suffixes) & set(other.suffixes)
        if shared and other.name != fmt.name:
            raise ValueError(f"{fmt.name} and {other.name} both claim {sorted(shared)}")
    FORMATS.add(fmt.name, fmt)
    return cls


def names() -> list[str]:
    """Names of the registered formats that files can be forced to (`input_format`)."""
    return [fmt.name for fmt in FORMATS if fmt.suffixes or fmt.folder]


def get(name: str) -> Format:
    """The format called `name`; InputError listing the known ones otherwise."""
    try:
        return FORMATS[name]
    except KeyError:
        raise InputError(f"unknown format {name!r} (known: {', '.join(names())})",
                         param="input_format") from None


def known() -> str:
    """The known formats with their suffixes, for messages."""
    parts = []
    for fmt in FORMATS:
        if fmt.suffixes:
            parts.append(f"{fmt.name} ({'/'.join(fmt.suffixes)}"
                         + (", also compressed" if fmt.compressible else "") + ")")
        elif fmt.folder:
            parts.append(f"{fmt.name} (a folder)")
    return "; ".join(parts) + f"; compressions {'/'.join(COMPRESSIONS)}"


def by_name(filename: str) -> tuple[Format, str | None] | None:
    """(format, compression) a file name asks for, or None when its suffix is unknown."""
    base, compression = compression_of(filename)
    lower = base.lower()
    best: tuple[int, Format] | None = None
    for fmt in FORMATS:
        if compression and not fmt.compressible:
            continue
        for suffix in fmt.suffixes:
            if lower.endswith(suffix) and (best is None or len(suffix) > best[0]):
                best = (len(suffix), fmt)
    return (best[1], compression) if best else None


def folder_format(source: Source) -> Format | None:
    """The folder format that recognises this directory (a saved HF dataset), if any."""
    for fmt in FORMATS:
        if fmt.folder and fmt.detect(source):
            return fmt
    return None
