"""`Selection`: a selection in memory, and its training-ready exports.

A selection holds the selected segments in rank order with their text, weights and corpus
metadata, plus the manifest that says how they were chosen. It converts to pandas, Arrow or a
Hugging Face dataset (optional dependencies, imported when asked for), writes the selection file
format (`selection_file`) and exports one training example per segment (`export`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Literal, Sequence, TextIO

import numpy as np

from tapt.errors import InputError, OutputError
from tapt.retriever.selections import export_schema
from tapt.retriever.selections.file_format import (
    SelectedSegment,
    is_selection,
    is_selection_manifest,
    is_unchanged_selection,
    manifest_path,
    read_selection,
    write_selection,
)
from tapt.util.files import (
    atomic_write,
    real_path,
    sha256_file,
    storage_error,
    temporary_sibling,
    write_json_atomic,
)
from tapt.util.safety import check_not_input, check_not_link, check_output, check_path

if TYPE_CHECKING:
    import datasets
    import pandas
    import pyarrow

ExportFormat = Literal["jsonl", "parquet", "hf", "txt"]
EXPORT_FORMATS: tuple[str, ...] = ("jsonl", "parquet", "hf", "txt")
_SUFFIX_FORMAT = {".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet", ".txt": "txt"}
# Names that promise what a plain JSON Lines or text file is not: written under them, other
# tools (tapt's own corpus reader too) would try to decompress or parse them.
_NOT_PLAIN_TEXT = (".gz", ".zst", ".zstd", ".bz2", ".xz", ".zip", ".parquet", ".pq", ".arrow",
                   ".feather", ".ipc", ".csv", ".tsv")
EXPORT_MARKER = "tapt_selection.json"      # inside an `hf` export folder: the selection manifest
_PARQUET_KEY = b"tapt_selection"           # parquet schema metadata: the selection manifest
_PARQUET_ROWS_KEY = b"tapt_rows_sha256"     # ... and a digest of its rows as tapt wrote them


def _require(module: str, what: str) -> Any:
    """Import an optional dependency, or say which package to install."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        package = module.split(".")[0]
        raise InputError(f"{what} needs the optional package {package}: pip install "
                         f"'tapt[hf]' (or pip install {package})") from exc


class Selection:
    """Selected segments in rank order, their text and corpus metadata, and the manifest.

    Args:
        segments: The segments, best first.
        manifest: How they were selected (method, parameters, task, index, counts, timings).
        path: The selection file this was read from or written to, if any.

    Examples:
        >>> task = ["Fever and a persistent cough.", "Reduced blood flow to the kidneys.",
        ...         "A rash on both arms."]
        >>> sel = ix.select("fused", task=task, budget="100sent")
        >>> list(sel.to_pandas().columns[:4])
        ['text', 'weight', 'score', 'tapt_rank']
        >>> sel.write("sel.jsonl").name
        'sel.jsonl'
        >>> tapt.Selection.read("sel.jsonl").ids.tolist() == sel.ids.tolist()
        True
        >>> sel.export("train.parquet").name, sel.export("train-ds", format="hf").name
        ('train.parquet', 'train-ds')
    """

    def __init__(self, segments: Sequence[SelectedSegment], manifest: dict[str, Any],
                 path: str | Path | None = None) -> None:
        self.segments: list[SelectedSegment] = list(segments)
        self.manifest: dict[str, Any] = manifest
        self.path: Path | None = Path(path) if path is not None else None

    # --- reading

    @classmethod
    def read(cls, path: str | Path) -> "Selection":
        """A selection file (format version 1 or 2) and its manifest.

        Args:
            path: The selection JSONL; its manifest sits beside it.

        Returns:
            The selection.

        Raises:
            InputError: the file or its manifest is missing, damaged or of another version.
        """
        from tapt.util.checks import path_text

        manifest, segments = read_selection(path_text(path, "path"))
        return cls(segments, manifest, path)

    # --- the data

    def __len__(self) -> int:
        return len(self.segments)

    def __iter__(self) -> Iterator[SelectedSegment]:
        return iter(self.segments)

    def __getitem__(self, i: int) -> SelectedSegment:
        return self.segments[i]

    def __repr__(self) -> str:
        where = f" -> {self.path}" if self.path else ""
        return f"<Selection {self.method}: {len(self)} segments{where}>"

    @property
    def method(self) -> str:
        """The method that made the selection."""
        return str(self.manifest.get("method"))

    @property
    def counts(self) -> dict[str, int]:
        """Selected segments, sentences and tokens."""
        return dict(self.manifest.get("counts", {}))

    @property
    def info(self) -> dict[str, Any]:
        """What the method reports about its run (e.g. knn's union size, auto's choice)."""
        return dict(self.manifest.get("info", {}))

    @property
    def warnings(self) -> list[str]:
        """Warnings about the task or the budget (also logged), e.g. a task too small to fit
        the method reliably."""
        return list(self.manifest.get("warnings", []))

    @property
    def ids(self) -> np.ndarray:
        """Segment ids (at the selection's segment size), in rank order."""
        return np.array([s.id for s in self.segments], dtype=np.int64)

    @property
    def rows(self) -> np.ndarray:
        """(n, 2) half-open sentence-row ranges of the segments."""
        return np.array([s.rows for s in self.segments], dtype=np.int64).reshape(-1, 2)

    @property
    def sentence_rows(self) -> np.ndarray:
        """Every selected sentence row (FAISS row == text-store key), in rank order."""
        parts = [np.arange(lo, hi) for lo, hi in self.rows]
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)

    @property
    def scores(self) -> np.ndarray:
        """The segments' scores (higher = more task-like), in rank order."""
        return np.array([s.score for s in self.segments], dtype=np.float64)

    @property
    def weights(self) -> np.ndarray:
        """The segments' training weights (1.0, or lambda for continuous selections)."""
        return np.array([s.weight for s in self.segments], dtype=np.float64)

    @property
    def texts(self) -> list[str]:
        """Each segment's text (its sentences joined by spaces), in rank order."""
        return [s.text for s in self.segments]

    @property
    def sentences(self) -> list[list[str]]:
        """Each segment's sentences, in rank order."""
        return [s.sentences for s in self.segments]

    @property
    def doc_keys(self) -> list[str | None]:
        """Each segment's document key in the corpus (None in version 1 files)."""
        return [s.doc_key for s in self.segments]

    @property
    def sources(self) -> list[str | None]:
        """Each segment's input file (None in version 1 files)."""
        return [s.source for s in self.segments]

    @property
    def meta(self) -> list[dict[str, Any]]:
        """Each segment's corpus metadata: the fields all of its sentences share."""
        return [s.meta for s in self.segments]

    def to_records(self) -> list[dict[str, Any]]:
        """One training example per segment (the columns of
        `tapt.retriever.selections.export_schema`).

        Returns:
            One dict per segment, in rank order: `text`, `weight` and `score` first, then
                tapt's provenance (`tapt_rank`, `tapt_id`, `tapt_doc`, `tapt_row_start`,
                `tapt_row_end`, `tapt_doc_key`, `tapt_source`, `tapt_sentences`,
                `tapt_sentence_meta`, `tapt_method`), then every corpus metadata field under
                its own name (None where a segment lacks it).
        """
        return export_schema.records(self.segments)

    def columns(self) -> list[str]:
        """The export's columns, in order: the fixed ones, then the corpus fields'.

        Returns:
            The column names.
        """
        return [*export_schema.FIXED, *export_schema.corpus_columns(self.segments).values()]

    def to_pandas(self) -> "pandas.DataFrame":
        """A pandas DataFrame, one row per segment (`tapt_sentence_meta` holds dicts).

        Returns:
            pandas.DataFrame with the columns of `to_records`.

        Raises:
            InputError: pandas is not installed.
        """
        pd = _require("pandas", "Selection.to_pandas")
        return pd.DataFrame(self.to_records(), columns=self.columns())

    def to_arrow(self) -> "pyarrow.Table":
        """A pyarrow Table, one row per segment: every corpus field a column of its own type
        (JSON text where its values have no one type); `tapt_sentence_meta` is JSON text.

        Returns:
            pyarrow.Table with the columns of `to_records`.

        Raises:
            InputError: pyarrow is not installed.
        """
        pa = _require("pyarrow", "Selection.to_arrow")
        return export_schema.arrow_table(pa, self.to_records(), self.columns())

    def to_hf_dataset(self) -> "datasets.Dataset":
        """A Hugging Face `datasets.Dataset` (the columns of `to_arrow`).

        Returns:
            datasets.Dataset, one row per segment.

        Raises:
            InputError: datasets (or pyarrow) is not installed.
        """
        datasets = _require("datasets", "Selection.to_hf_dataset")
        return datasets.Dataset(self.to_arrow())

    # --- writing

    def inputs(self) -> list[str]:
        """Paths this selection was made from, which it never writes to.

        Returns:
            The task files and the index directory.
        """
        task = self.manifest.get("task") or {}
        files = ([f for f in task.get("files", []) if f not in ("-", "<stdin>")]
                 if isinstance(task, dict) else [])
        index = (self.manifest.get("index") or {}).get("path")
        return files + ([index] if index else [])

    def write(self, path: str | Path, overwrite: bool = False) -> Path:
        """Write the selection file (JSONL) and its manifest beside it, atomically.

        Args:
            path: The selection file to write (its manifest goes to PATH.manifest.json).
            overwrite: Replace a selection file tapt wrote that was edited since. An unedited
                tapt selection is replaced without it; a file tapt did not write never is.

        Returns:
            The path written.

        Raises:
            OutputError: `path` is an input of the selection, lies inside an index, or holds
                something else that may not be replaced.
        """
        check_path(path)
        path = check_selection_output(path, self.inputs(), overwrite)
        write_selection(path, self.segments, self.manifest)
        self.path = path
        return path

    def write_lines(self, stream: TextIO) -> None:
        """The selection file's lines to a text stream (stdout: no manifest is written).

        Args:
            stream: A text stream, e.g. `sys.stdout`.
        """
        for seg in self.segments:
            stream.write(seg.to_json() + "\n")

    def export(self, out: str | Path, format: ExportFormat | None = None,
               overwrite: bool = False) -> Path:
        """Write training-ready data: one example per segment with its text and weight.

        Args:
            out: The file (jsonl, parquet, txt) or folder (hf) to write.
            format: jsonl, parquet, hf (a `datasets` save_to_disk folder) or txt (one segment
                per line; weights are dropped); default: from the suffix of `out`.
            overwrite: Replace a jsonl or parquet export tapt wrote that may have changed
                since (an unchanged parquet export and an hf folder are replaced without it).
                A file tapt did not write is never replaced, whatever the flags, nor is a txt
                export (it carries no mark of tapt); an existing file that already holds
                exactly this export is left as it is.

        Returns:
            The path written.

        Raises:
            InputError: unknown format, or its optional package is missing.
            OutputError: `out` may not be written (see `tapt.util.safety.check_output`).
        """
        check_path(out)
        check_not_link(out)
        fmt = export_format(out, format)
        inputs = self.inputs() + ([str(self.path), str(manifest_path(self.path))]
                                  if self.path else [])
        if fmt == "hf":
            target = check_output(out, what="export", inputs=inputs, overwrite=overwrite,
                                  ours=_is_hf_export, directory=True)
            self._export_hf(target)
            return target
        if fmt in ("jsonl", "txt") and _holds_lines(Path(out), self.lines(fmt)):
            return real_path(out)              # a rerun: nothing to replace
        ours = _is_parquet_export if fmt == "parquet" else None
        made = {"parquet": _has_export_metadata, "jsonl": _is_jsonl_export}.get(fmt)
        target = check_output(out, what="text export" if fmt == "txt" else "export",
                              inputs=inputs, overwrite=overwrite, ours=ours, made=made,
                              marked=fmt != "txt")
        target.parent.mkdir(parents=True, exist_ok=True)
        if fmt == "parquet":
            self._export_parquet(target)
        else:
            with atomic_write(target, "w") as fh:
                fh.writelines(self.lines(fmt))
        return target

    def lines(self, format: Literal["jsonl", "txt"] = "jsonl") -> Iterator[str]:
        """The export as text lines (newline-terminated).

        Args:
            format: jsonl (one JSON object per segment) or txt (one segment's text per line).

        Returns:
            An iterator of lines.

        Raises:
            InputError: another format.
        """
        if format not in ("jsonl", "txt"):
            raise InputError(f"{format} is not a line format (jsonl or txt)", param="format")
        for rec in self.to_records():
            if format == "txt":
                yield " ".join(rec["text"].split()) + "\n"
            else:
                yield json.dumps(rec, ensure_ascii=False) + "\n"

    def _export_parquet(self, target: Path) -> None:
        pq = _require("pyarrow.parquet", "export to parquet")
        table = self.to_arrow()
        table = table.replace_schema_metadata(
            {_PARQUET_KEY: json.dumps(self.manifest, ensure_ascii=False).encode(),
             _PARQUET_ROWS_KEY: _rows_digest(table).encode()})
        with atomic_write(target, "wb") as fh:
            pq.write_table(table, fh)

    def _export_hf(self, target: Path) -> None:
        import datasets

        dataset = self.to_hf_dataset()
        work = temporary_sibling(target, "export")
        shutil.rmtree(work, ignore_errors=True)
        bars = datasets.is_progress_bar_enabled()
        datasets.disable_progress_bars()       # a few rows: its "Saving the dataset" bar is noise
        try:
            dataset.save_to_disk(str(work))
            write_json_atomic(work / EXPORT_MARKER, self.manifest)
            old = None
            if target.exists():
                old = temporary_sibling(target, "old")
                os.replace(target, old)
            os.replace(work, target)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        except OSError as exc:
            raise storage_error(exc, target) from exc
        finally:
            if bars:
                datasets.enable_progress_bars()
            shutil.rmtree(work, ignore_errors=True)


# What `Dataset.save_to_disk` and the export write in an hf export folder, and nothing else.
_HF_EXPORT_FILES = re.compile(r"^(data-\d{5}-of-\d{5}\.arrow|dataset_info\.json|state\.json|"
                              + re.escape(EXPORT_MARKER) + r")$")


def _holds_lines(path: Path, lines: Iterator[str]) -> bool:
    """Whether the regular file `path` holds exactly these lines (UTF-8): writing them again
    would change nothing."""
    if not path.is_file():
        return False
    digest, size, limit = hashlib.sha256(), 0, path.stat().st_size
    for line in lines:
        data = line.encode("utf-8")
        digest.update(data)
        size += len(data)
        if size > limit:
            return False
    return size == limit and sha256_file(path) == digest.hexdigest()


def _is_hf_export(path: Path) -> bool:
    """An hf export folder tapt wrote, holding only the files it writes there (a folder with a
    user's file added is theirs: never replaced)."""
    if not (path / EXPORT_MARKER).is_file():
        return False
    return all(entry.is_file() and not entry.is_symlink() and _HF_EXPORT_FILES.match(entry.name)
               for entry in path.iterdir())


def _rows_digest(table) -> str:
    """SHA-256 of an export table's segment ids and texts, in order."""
    digest = hashlib.sha256()
    ids = export_schema.ID_COLUMN if export_schema.ID_COLUMN in table.column_names else "id"
    for seg_id, text in zip(table.column(ids).to_pylist(), table.column("text").to_pylist()):
        data = (text or "").encode("utf-8", "surrogatepass")
        digest.update(f"{seg_id}\t{len(data)}\n".encode())
        digest.update(data)
    return digest.hexdigest()


def _has_export_metadata(path: Path) -> bool:
    """A parquet file carrying a tapt export's metadata (possibly changed since)."""
    try:
        import pyarrow.parquet as pq

        return _PARQUET_KEY in (pq.read_schema(path).metadata or {})
    except Exception:  # noqa: BLE001 - anything unreadable is not ours
        return False


def _is_jsonl_export(path: Path) -> bool:
    """A JSON Lines file whose first record has the columns of a tapt jsonl export."""
    try:
        with open(path, encoding="utf-8") as fh:
            first = fh.readline(1 << 24)
        record = json.loads(first)
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(record, dict) and (set(export_schema.FIXED) <= set(record)
                                         or set(export_schema.OLD_COLUMNS) <= set(record))


def _is_parquet_export(path: Path) -> bool:
    """A parquet export tapt wrote and nobody changed since: its metadata and its rows' digest
    (a file derived from an export, such as a filtered copy, is the user's)."""
    try:
        import pyarrow.parquet as pq

        metadata = pq.read_schema(path).metadata or {}
        if _PARQUET_KEY not in metadata or _PARQUET_ROWS_KEY not in metadata:
            return False
        names = pq.read_schema(path).names
        ids = export_schema.ID_COLUMN if export_schema.ID_COLUMN in names else "id"
        table = pq.read_table(path, columns=[ids, "text"])
        return _rows_digest(table) == metadata[_PARQUET_ROWS_KEY].decode()
    except Exception:  # noqa: BLE001 - anything unreadable is not ours
        return False


def export_format(out: str | Path, format: str | None) -> str:
    """The export format asked for, or the one the suffix of `out` names."""
    if format is not None:
        if format not in EXPORT_FORMATS:
            raise InputError(f"unknown format {format!r}: use one of {', '.join(EXPORT_FORMATS)}",
                             param="format")
        if format in ("jsonl", "txt"):
            _check_plain_name(out, f"a {format} export", "name it .jsonl or .txt (compress it "
                              "afterwards if you need to), or export with format parquet or hf")
        return format
    guessed = _SUFFIX_FORMAT.get(Path(out).suffix.lower())
    if guessed is None:
        raise InputError(f"cannot tell the format from {out}: pass `format` "
                         f"({', '.join(EXPORT_FORMATS)})", param="format")
    return guessed


def _check_plain_name(out: str | Path, what: str, hint: str) -> None:
    """Refuse to write plain JSON Lines or text under a name that says otherwise (.gz, .parquet)."""
    suffix = Path(out).suffix.lower()
    if suffix in _NOT_PLAIN_TEXT:
        raise InputError(f"{out}: {what} is plain, uncompressed text, not {suffix[1:]}; {hint}",
                         param="out")


def check_selection_output(out: str | Path, inputs: Sequence[str | Path],
                           overwrite: bool = False) -> Path:
    """`check_output` for a selection file and the manifest written beside it.

    An existing selection, unchanged since tapt wrote it, is replaced; any other existing file
    (an edited selection too) only with `overwrite`; a file beside it at the manifest's path
    that is not a selection manifest, and an input (task file, index, anything inside an
    index), never.
    """
    _check_plain_name(out, "a selection file", "name it .jsonl (`tapt export` writes it as "
                      "parquet or an hf dataset)")
    target = check_output(out, what="selection", inputs=inputs, overwrite=overwrite,
                          ours=is_unchanged_selection, made=is_selection)
    beside = manifest_path(target)
    try:
        check_not_link(beside, param=None)
        check_not_input(beside, inputs, param="out")
    except OutputError as exc:
        raise OutputError(f"the selection's manifest {exc}", param="out") from None
    if (beside.exists() or beside.is_symlink()) and not is_selection_manifest(beside):
        raise OutputError(f"{beside} exists and is not a selection manifest written by tapt; it "
                          "is never replaced (the manifest is written there): move it, or "
                          "choose another path", param="out")
    return target
