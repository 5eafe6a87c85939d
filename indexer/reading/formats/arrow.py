"""Arrow IPC files (.arrow, .feather, .ipc; the stream form `datasets` writes, or the file
form) and Hugging Face `save_to_disk` folders (recognised by state.json and dataset_info.json,
or dataset_dict.json for a DatasetDict, whose split `hf_split` chooses). Read with pyarrow,
memory-mapped where local: `datasets` is not needed for these."""

from __future__ import annotations

import contextlib
import json
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
from tapt.indexer.reading.formats.sources import Source

log = logging.getLogger(__name__)


@contextlib.contextmanager
def _ipc(source: Source) -> Iterator[tuple[Any, Iterator[Any]]]:
    """(schema, record batches) of one Arrow IPC file, file or stream form."""
    import pyarrow as pa

    with contextlib.ExitStack() as stack:
        try:
            if source.local is not None:
                data = stack.enter_context(pa.memory_map(str(source.local)))
            else:
                data = stack.enter_context(source.open())
            try:
                reader = pa.ipc.open_file(data)
                batches: Iterator[Any] = (reader.get_batch(i)
                                          for i in range(reader.num_record_batches))
            except pa.ArrowInvalid:
                data.seek(0)
                reader = pa.ipc.open_stream(data)
                batches = iter(reader)
            yield reader.schema, _checked(source, batches)
        except InputError:
            raise
        except (pa.ArrowException, OSError) as exc:
            raise InputError(f"{source.name}: cannot read as Arrow IPC ({exc})") from exc


def _checked(source: Source, batches: Iterator[Any]) -> Iterator[Any]:
    import pyarrow as pa

    try:
        yield from batches
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"{source.name}: cannot read as Arrow IPC ({exc})") from exc


def _scan_files(name: str, files: list[Source], options: ReadOptions) -> Scanned:
    """Schema check and row count (from the batches' headers) of Arrow files read as one."""
    rows = 0
    columns: list[str] | None = None
    for source in files:
        with _ipc(source) as (schema, batches):
            keep = check_text_column(source.name, schema, options)
            if columns is not None and keep != columns:
                raise InputError(f"{source.name}: its columns differ from {files[0].name}'s")
            columns = keep
            dropped = sorted(set(schema.names) - set(keep))
            if dropped:
                log.info("%s: binary columns not kept as metadata: %s", source.name,
                         ", ".join(dropped))
            rows += sum(batch.num_rows for batch in batches)
    if rows == 0:
        raise InputError(f"{name}: holds no text (no rows)")
    return Scanned(rows, exact=False, detail={"columns": columns})


def _rows(file: InputFile, files: list[Source], options: ReadOptions) -> Iterator[Row]:
    name, columns = file.name, file.scanned.detail["columns"]
    number = 1
    for source in files:
        with _ipc(source) as (_, batches):
            for row in table_rows(name, (b.select(columns) for b in batches), options, number,
                                  file=file):
                number += 1
                yield row


@register
class ArrowFormat(Format):
    name = "arrow"
    order = 50
    suffixes = (".arrow", ".feather", ".ipc")
    summary = "Arrow IPC (stream or file form, as datasets writes it); like Parquet"
    title = "Arrow IPC"
    packed = "inside the file"
    text = "the `--text-field` column"
    fields = "metadata"

    def scan(self, file: InputFile, options: ReadOptions) -> Scanned:
        return _scan_files(file.name, [file.source], options)

    def rows(self, file: InputFile, options: ReadOptions) -> Iterator[Row]:
        return _rows(file, [file.source], options)


@register
class HfDiskFormat(Format):
    name = "hf-disk"
    order = 51
    folder = True
    summary = "a Hugging Face datasets save_to_disk folder (Dataset, or a DatasetDict split)"
    title = "Hugging Face saved dataset"
    source = "a `save_to_disk` folder"
    packed = "inside the files"
    text = "the `--text-field` column"
    fields = "metadata"
    options = ("hf_split",)

    def detect(self, source: Source) -> bool:
        if not source.is_dir():
            return False
        return source.child("dataset_dict.json").exists() or (
            source.child("state.json").exists() and source.child("dataset_info.json").exists())

    def _data_files(self, source: Source, options: ReadOptions) -> list[Source]:
        """The Arrow files of the dataset (of the chosen split of a DatasetDict), in order."""
        if source.child("dataset_dict.json").exists():
            splits = _json(source.child("dataset_dict.json")).get("splits") or []
            if options.hf_split is not None:
                split = options.hf_split
                if split not in splits:
                    raise InputError(f"{source.name} has no split {split!r} (splits: "
                                     f"{', '.join(splits)})", param="hf_split")
            elif len(splits) == 1:
                split = splits[0]
            else:
                raise InputError(f"{source.name} is a DatasetDict with splits "
                                 f"{', '.join(splits)}: choose one", param="hf_split")
            source = source.child(split)
        state = _json(source.child("state.json"))
        files = [f.get("filename") for f in state.get("_data_files") or []
                 if isinstance(f, dict)]
        if not files or not all(isinstance(f, str) for f in files):
            raise InputError(f"{source.name}/state.json lists no data files")
        return [source.child(f) for f in files]

    def scan(self, file: InputFile, options: ReadOptions) -> Scanned:
        files = self._data_files(file.source, options)
        scanned = _scan_files(file.name, files, options)
        return Scanned(scanned.records, exact=False,
                       detail={**scanned.detail, "files": [f.name for f in files]})

    def rows(self, file: InputFile, options: ReadOptions) -> Iterator[Row]:
        files = self._data_files(file.source, options)
        return _rows(file, files, options)


def _json(source: Source) -> dict[str, Any]:
    try:
        with source.open() as fh:
            obj = json.load(fh)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{source.name}: not valid JSON ({exc})") from exc
    except OSError as exc:
        raise InputError(f"{source.name}: cannot read ({exc})") from exc
    if not isinstance(obj, dict):
        raise InputError(f"{source.name}: not a datasets metadata file")
    return obj
