"""Large line files read in pieces: byte ranges of one uncompressed JSON Lines or plain text
file, scanned and read apart (by tasks of a cluster), that together read the file as one pass
does.

A piece is a copy of the file's `base.InputFile` (the `file` each function here takes) with a
`span` of bytes [start, end): it owns the lines that begin inside it (a line begins at byte 0
or after a newline), however far they run past its end, so every line is owned by exactly one
piece. Its lines are numbered from its
`first_line` (the lines of the pieces before it, known once they are scanned; 0 while it is
scanned itself: errors then carry the piece's own numbering, `base.LineError.moved`). What a
format makes of the lines (a document of several records, a block of lines) is owned by the
piece it begins in: a piece reads on past its end to finish its last document, and skips, at
its start, what continues the document before it (`lines_before` reads the line before a
piece, backwards).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator

from tapt.indexer.reading.formats.sources import MAX_LINE_BYTES

SPLIT_FORMATS = ("jsonl", "text")
_BACK = 1 << 16


def splittable(file: Any) -> bool:
    """Whether a file can be read in pieces: an uncompressed local JSON Lines or text file."""
    return (file.format.name in SPLIT_FORMATS and file.compression is None
            and file.source.local is not None and file.span is None)


def split(file: Any, size: int) -> list[Any]:
    """The pieces of `file` of about `size` bytes each (the file itself where it is not larger,
    or cannot be read in pieces)."""
    if not splittable(file):
        return [file]
    total = file.source.local.stat().st_size
    if total <= size:
        return [file]
    return [dataclasses.replace(file, span=(start, min(total, start + size)), first_line=0,
                                scanned=None)
            for start in range(0, total, size)]


def raw_lines(file: Any) -> Iterator[tuple[int, bytes, bool]]:
    """(line number, raw line, owned) from the first line that begins inside the piece on: its
    own lines, then (unowned) the lines after its end, as long as the consumer reads."""
    from tapt.indexer.reading.formats.sources import SNIFF_BYTES, looks_binary

    start, end = file.span
    with file.open() as fh:
        if start == 0:
            head = fh.read(SNIFF_BYTES)
            if b"\x00" in head and looks_binary(head):
                from tapt.errors import InputError

                raise InputError(f"{file.name}: a binary file (NUL bytes in its first 8 KB), "
                                 "not text")
            fh.seek(0)
            at = 0
        else:
            fh.seek(start - 1)
            at = start - 1 + len(fh.readline())     # the first line beginning at or after start
        lineno = file.first_line
        while True:
            raw = fh.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            lineno += 1
            yield lineno, raw, at < end
            at += len(raw)


def lines_before(file: Any) -> Iterator[tuple[int, str]]:
    """(line number, text) of the lines before a piece's first line, last first (read
    backwards, `_BACK` bytes at a time; decoded with U+FFFD for invalid bytes): what a format
    needs to know of the document the piece may begin inside."""
    start = file.span[0]
    if start == 0:
        return
    with file.open() as fh:
        fh.seek(start - 1)
        first = start - 1 + len(fh.readline())
        end = first - 1                    # the newline that ends the line before
        if first >= fh.seek(0, 2):
            return                         # the piece begins no line at all
        lineno = file.first_line
        while end >= 0:
            begin = _line_start(fh, end)
            fh.seek(begin)
            yield lineno, fh.read(end - begin).decode("utf-8", errors="replace")
            if begin == 0:
                return
            lineno, end = lineno - 1, begin - 1


def _line_start(fh, end: int) -> int:
    """Where the line ending at byte `end` (its newline) begins."""
    pos = end
    while pos > 0:
        step = min(_BACK, pos)
        fh.seek(pos - step)
        cut = fh.read(step).rfind(b"\n")
        if cut >= 0:
            return pos - step + cut + 1
        pos -= step
    return 0
