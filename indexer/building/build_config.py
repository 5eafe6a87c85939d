"""BuildConfig: the options of one index build, validated on creation. Each field that is an
option of `tapt index build` (and `index add`) carries its command-line description in its
metadata (`help`, `flag`, `metavar`, `choices`, bounds, `show_default`; `add`: how `index add`
differs), which `tapt.api.options.config_fields` hands to the command line."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from tapt.errors import InputError
from tapt.indexer.ann.index_choice import DEFAULT_MEMORY, REQUESTS, parse_memory
from tapt.indexer.building.executors import executor_names
from tapt.indexer.reading import formats
from tapt.indexer.reading.formats import ReadOptions
from tapt.indexer.reading.reader import TextDocs
from tapt.util.checks import whole_number
from tapt.util.sizes import parse_memory as parse_size

EMBEDDING_DTYPES = ("auto", "float32", "float16")
CODES = ("none", "int8")
_COUNT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)\s*$")
_SAME: dict = {}                      # `add`: the option of `index add` is the build's
_FROM_INDEX = {"from_index": True}    # `add`: the same, defaulting to the index's own setting


def parse_count(spec: str | int, param: str = "shard_size") -> int:
    """`2M`, `500k`, `1.5M`, `20000` -> a whole count (decimal units); InputError otherwise."""
    if isinstance(spec, int) and not isinstance(spec, bool):
        value = float(spec) if abs(spec) < 2**1000 else math.inf
    else:
        match = _COUNT.match(str(spec))
        if not match:
            raise InputError(f"{spec!r}: use a count like 2M, 500k or 20000", param=param)
        value = float(match.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[
            match.group(2).lower()]
    if not math.isfinite(value):    # more digits than a float holds, or 1e400
        raise InputError(f"{str(spec)[:24]!r}... is too large", param=param)
    if value < 1 or value != int(value):
        raise InputError(f"{spec!r} must be a whole number of at least 1", param=param)
    return int(value)


@dataclass
class BuildConfig:
    """Options of one index build, validated on creation."""

    segment_size: int = field(default=15, metadata={
        "help": "Sentences per segment (the selection unit).", "show_default": True})
    batch_size: int | None = field(default=None, metadata={  # None: by the embedding device
        "help": "Sentences per encoder batch [default: 1024 on CUDA, 64 on the CPU].",
        "minimum": 1,
        "add": {"help": "Sentences per encoder batch [default: the build's, else 1024 on CUDA "
                        "and 64 on the CPU]."}})
    part_size: int | str = field(default=4096, metadata={  # a count: 4096, "64k"
        "help": "Sentences per embed part: the unit a resumed build redoes and a Ray embed task "
                "embeds (64k for corpora of 10^9 sentences and more, so a Ray driver tracks "
                "fewer parts).",
        "type": "str", "metavar": "ROWS", "show_default": True})
    split: bool = field(default=True, metadata={
        "help": "Split records into sentences (--no-split: each record is one sentence).",
        "flag": "--split/--no-split", "show_default": True})
    text_field: str = field(default="text", metadata={
        "help": "Field (JSONL) or column (Parquet, CSV/TSV, Arrow, HF datasets) with the text.",
        "show_default": True, "add": _FROM_INDEX})
    doc_field: str | None = field(default="doc", metadata={
        "help": "Field/column whose equal consecutive values join records into one document "
                "('' = none).",
        "show_default": True, "add": _FROM_INDEX})
    text_docs: TextDocs = field(default="auto", metadata={
        "help": "Plain text: one document per line, or per blank-line block.",
        "choices": ("auto", "line", "block"), "show_default": True, "add": _FROM_INDEX})
    input_format: str | None = field(default=None, metadata={  # else by each file's suffix
        "help": "Read every input file as this format (files without a telling extension) "
                "[default: by extension].",
        "choices": formats.names, "add": _SAME})
    hf_split: str | None = field(default=None, metadata={  # of a DatasetDict folder or Hub dataset
        "help": "Split of --hf-dataset [default: train] and of DatasetDict folders [default: "
                "their only split].",
        "add": _SAME})
    strict: bool = field(default=False, metadata={
        "help": "Refuse folders holding files of no known format (default: skip them and list "
                "them at INFO).",
        "add": _SAME})
    invalid_utf8: str = field(default="error", metadata={  # replace: read as U+FFFD, counted
        "help": "Text that is not valid UTF-8, or holds NUL: stop at its file and line (error), "
                "or read each invalid byte (and NUL) as U+FFFD and count the records (replace).",
        "choices": ("error", "replace"), "show_default": True, "add": _FROM_INDEX})
    overwrite: bool = field(default=False, metadata={
        "help": "Replace an existing tapt index at --out (never anything else)."})
    restart: bool = field(default=False, metadata={
        "help": "Discard an interrupted build of --out instead of resuming it.",
        "add": {"help": "Discard an interrupted add of IDX instead of resuming it."}})
    progress: bool = True
    index: str = field(default="auto", metadata={    # auto, flat, hnsw or ivfpq (index_choice)
        "was": "index_type"})
    memory: str | int = DEFAULT_MEMORY  # budget for the FAISS index in RAM
    opq: bool = False
    embedding_dtype: str = field(default="auto", metadata={  # see `resolve_dtype`
        "help": "Stored embeddings: float16 halves their disk and page-cache size (cosine error "
                "~5e-5 at most); scoring always computes in float32. auto = float16 when the "
                "index has several shards or its corpus 1M records or more, else float32.",
        "choices": EMBEDDING_DTYPES, "show_default": True})
    shards: int | None = field(default=None, metadata={  # whole files each
        "help": "Split the input files into this many shards (whole files each, about equal "
                "record counts) [default: one shard].",
        "minimum": 1, "add": _SAME})
    shard_size: int | str | None = field(default=None, metadata={  # or: records per shard
        "help": "Or: start a new shard before a file would take the shard past this many input "
                "records (2M, 500k, ...).",
        "type": "str", "metavar": "COUNT", "add": _SAME})
    piece_size: int | str = field(default="256M", metadata={
        "help": "Uncompressed JSON Lines and text files larger than this are scanned and "
                "prepared in byte ranges of this size, in parallel (a shard may then end inside "
                "a file, its documents kept whole).",
        "type": "str", "metavar": "SIZE", "show_default": True, "add": _SAME})
    codes: str = field(default="none", metadata={  # int8: for `scan="codes"` selection
        "help": "Also store int8 codes of the embeddings, for `select --scan codes` on indexes "
                "too large to scan exactly (1 byte per dimension per sentence).",
        "choices": CODES, "show_default": True})
    executor: str = field(default="local", metadata={
        "help": "What runs the build's stages (local: this process; ray: a Ray cluster, see "
                "--ray-address; needs pip install 'tapt[ray]').",
        "choices": executor_names, "show_default": True, "add": _SAME})

    def __post_init__(self) -> None:
        whole_number(self.segment_size, "segment_size", maximum=2**31 - 1)
        self.part_size = parse_count(self.part_size, param="part_size")
        if self.batch_size is not None:
            whole_number(self.batch_size, "batch_size")
            self.part_size = max(self.part_size, self.batch_size)
        self.doc_field = self.doc_field or None     # '' turns joining off
        ReadOptions(self.text_field, self.doc_field, self.text_docs, self.input_format,
                    self.hf_split, self.strict, self.invalid_utf8)  # validates them
        if self.index not in REQUESTS:
            raise InputError(f"must be one of {', '.join(REQUESTS)}", param="index")
        parse_memory(self.memory)
        if self.embedding_dtype not in EMBEDDING_DTYPES:
            raise InputError(f"must be one of {', '.join(EMBEDDING_DTYPES)}",
                             param="embedding_dtype")
        if self.shards is not None:
            whole_number(self.shards, "shards")
        if self.shards is not None and self.shard_size is not None:
            raise InputError("give `shards` or `shard_size`, not both", param="shard_size")
        if self.shard_size is not None:
            self.shard_size = parse_count(self.shard_size)
        try:
            self.piece_size = parse_size(self.piece_size)
        except InputError as exc:
            raise InputError(exc.message, param="piece_size") from None
        if self.codes not in CODES:
            raise InputError(f"must be one of {', '.join(CODES)}", param="codes")
        if self.executor not in executor_names():
            raise InputError(f"unknown executor {self.executor!r}: use one of "
                             f"{', '.join(executor_names())}", param="executor")

    @property
    def sharded(self) -> bool:
        return self.shards is not None and self.shards > 1 or self.shard_size is not None
