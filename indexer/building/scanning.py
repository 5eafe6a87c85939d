"""The scan of a build's or an add's inputs, in the build's executor: one task per input file,
and per byte range of a large uncompressed JSON Lines or text file (`formats.spans`), so the
driver parses nothing (on Ray the tasks run over the cluster; locally one after another, as the
scan always did).

Each task runs its file's or piece's format scan (validate, count) and returns what it found
and how many lines it read; the driver numbers each piece's lines from the lines of the pieces
before it, combines a file's pieces into the file's scan (`Format.combine`), and reports the
first bad line of the corpus, in reading order, at its line in the file, as one pass would: a
piece's error carries its own numbering (`LineError`) until the lines before it are known.
Hugging Face Hub datasets (streamed) are scanned here, from their metadata.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tapt.indexer.building.executor_base import Executor, Stage
from tapt.indexer.reading.formats import InputFile, ReadOptions, Scanned
from tapt.indexer.reading.formats.base import LineError
from tapt.indexer.reading.formats.sources import HubSource
from tapt.indexer.reading.formats.spans import split
from tapt.indexer.reading.reader import CorpusScan, InputSpec, expand_inputs, without_empty


@dataclass(frozen=True)
class ScanTask:
    """One input file, or one piece of one, and how it is read."""

    file: InputFile
    options: ReadOptions


def scan_piece(task: ScanTask) -> dict[str, Any]:
    """{"scanned": its format's scan, "lines": lines read} of one file or piece, or {"error": the
    LineError at its first bad line, numbered from the piece's start}."""
    f = task.file
    try:
        scanned = f.format.scan(f, task.options)
    except LineError as exc:
        return {"error": exc}
    return {"scanned": scanned, "lines": f.lines_read}


def scan_corpus(inputs: list[InputSpec], options: ReadOptions, runner: Executor,
                piece_size: int, memory: int = 0) -> CorpusScan:
    """Find, validate and count every input file before anything is embedded, in tasks of
    `runner` (see the module docstring).

    Args:
        inputs: Paths, folders, URLs or HubDataset specs (`reader.expand_inputs`).
        options: How they are read.
        runner: Runs the scan tasks.
        piece_size: Line files larger than this are read in pieces of this many bytes.
        memory: What a task asks its executor for.

    Returns:
        The scan: the files (with the whole file's scan) and the pieces to read.

    Raises:
        InputError: a bad input, at the first bad line or row in reading order.
    """
    files = expand_inputs(inputs, options)
    pieces_of = [split(f, piece_size) for f in files]
    pieces = [p for group in pieces_of for p in group]
    remote = [i for i, p in enumerate(pieces) if not isinstance(p.source, HubSource)]
    found: dict[int, dict[str, Any]] = {}
    for i, p in enumerate(pieces):
        if i not in remote:
            found[i] = {"scanned": p.format.scan(p, options), "lines": 0}
    stage = Stage("scan", scan_piece, unit="file", memory=memory)
    for at, result in runner.imap(stage, [ScanTask(pieces[i], options) for i in remote]):
        found[remote[at]] = result
        if "error" in result and all(j in found for j in range(remote[at])):
            break               # every piece before it is scanned: this error is the first
    errors = sorted(i for i, r in found.items() if "error" in r)
    if errors:
        first = errors[0]
        before = 0
        for j in range(first):
            if pieces[j].source is pieces[first].source:
                before += found[j]["lines"]
        raise found[first]["error"].moved(before)
    at = 0
    for f, group in zip(files, pieces_of):
        scans = [found[at + k]["scanned"] for k in range(len(group))]
        if len(group) == 1 and group[0] is f:
            f.scanned = scans[0]
        else:
            f.scanned = f.format.combine(scans, options)
            lines = 0
            for k, piece in enumerate(group):
                piece.scanned = Scanned(scans[k].records, scans[k].blank, True,
                                        f.scanned.detail)
                piece.first_line = lines
                lines += found[at + k]["lines"]
        at += len(group)
    return without_empty(CorpusScan(files, options, pieces))
