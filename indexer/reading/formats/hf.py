"""Hugging Face Hub datasets (`--hf-dataset NAME[:CONFIG] --hf-split S`), streamed through
`datasets` (`load_dataset(..., streaming=True)`): nothing is downloaded ahead. A local folder of
data files that `datasets.load_dataset` reads works the same way, offline. The scan checks the
features (or the first record) and takes the row count from the dataset card where it has one;
records are validated as they stream."""

from __future__ import annotations

import logging
from typing import Any, Iterator

from tapt.errors import InputError
from tapt.indexer.reading.formats.base import (
    Format,
    InputFile,
    ReadOptions,
    Row,
    Scanned,
    json_safe,
    register,
)
from tapt.indexer.reading.formats.sources import HubSource

log = logging.getLogger(__name__)


def _datasets() -> Any:
    try:
        import datasets
    except ImportError as exc:
        raise InputError("reading a Hugging Face Hub dataset needs the datasets package: "
                         "pip install 'tapt[hf]'", param="hf_dataset") from exc
    return datasets


def _load(source: HubSource, options: ReadOptions) -> tuple[Any, str]:
    datasets = _datasets()
    spec = source.dataset
    split = spec.split or options.hf_split or "train"
    try:
        return datasets.load_dataset(spec.name, spec.config, split=split, streaming=True), split
    except ConnectionError as exc:
        raise InputError(f"{spec.name}: cannot reach the Hugging Face Hub (offline, or "
                         "HF_HUB_OFFLINE/HF_DATASETS_OFFLINE is set); save the dataset once "
                         "with datasets' save_to_disk where you are online and index that "
                         "folder", param="hf_dataset") from exc
    except Exception as exc:  # datasets raises many types; each is a one-line input error
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"{spec.name}: cannot load ({detail})", param="hf_dataset") from exc


@register
class HubFormat(Format):
    name = "hf-hub"
    order = 60
    summary = "a Hugging Face Hub dataset, streamed (--hf-dataset NAME[:CONFIG] --hf-split S)"
    title = "Hugging Face Hub dataset"
    source = "`--hf-dataset NAME[:CONFIG]`"
    packed = "-"
    text = "the `--text-field` column"
    fields = "metadata"
    options = ("hf_split",)

    def scan(self, file: InputFile, options: ReadOptions) -> Scanned:
        if not isinstance(file.source, HubSource):
            raise InputError(f"{file.name}: Hub datasets are named with `hf_dataset`",
                             param="input_format")
        ds, split = _load(file.source, options)
        features = getattr(ds, "features", None)
        if features is not None:
            if options.text_field not in features:
                raise InputError(f"{file.name}: no column '{options.text_field}' (columns: "
                                 f"{', '.join(features)})", param="text_field")
            dtype = getattr(features[options.text_field], "dtype", None)
            if dtype not in ("string", "large_string", "string_view"):
                raise InputError(f"{file.name}: column '{options.text_field}' holds "
                                 f"{features[options.text_field]}, not text", param="text_field")
        else:
            first = next(iter(self._stream(file, ds, options)), None)
            if first is None:
                raise InputError(f"{file.name}: holds no text (no rows)")
        splits = getattr(ds.info, "splits", None) or {}
        records = splits[split].num_examples if split in splits else None
        return Scanned(records or None, exact=False, detail={"split": split})

    def _stream(self, file: InputFile, ds: Any, options: ReadOptions) -> Iterator[Row]:
        number = 0
        try:
            for example in ds:
                number += 1
                if options.text_field not in example:
                    raise InputError(f"{file.name}:row {number}: no field '{options.text_field}' "
                                     f"(fields: {', '.join(example)})", param="text_field")
                text = example.pop(options.text_field)
                if text is not None and not isinstance(text, str):
                    raise InputError(f"{file.name}:row {number}: field '{options.text_field}' "
                                     "is not a string", param="text_field")
                meta = {}
                for key, value in example.items():
                    keep, value = json_safe(value)
                    if keep:
                        meta[key] = value
                yield Row(f"{file.name}:row {number}", text, meta)
        except InputError:
            raise
        except Exception as exc:  # a network or data error in the middle of the stream
            raise InputError(f"{file.name}:row {number + 1}: cannot read ({type(exc).__name__}: "
                             f"{str(exc).splitlines()[0] if str(exc) else ''})") from exc

    def rows(self, file: InputFile, options: ReadOptions) -> Iterator[Row]:
        ds, _ = _load(file.source, options)
        return self._stream(file, ds, options)
