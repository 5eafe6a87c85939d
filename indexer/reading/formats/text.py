"""Plain text (.txt, .text), optionally compressed: one document per line, or per blank-line
block (`text_docs`; auto: blocks when a blank line separates two text lines)."""

from __future__ import annotations

import itertools
from typing import Iterator

from tapt.indexer.reading.formats import spans
from tapt.indexer.reading.formats.base import Format, InputFile, ReadOptions, Row, Scanned, register


@register
class TextFormat(Format):
    name = "text"
    order = 20
    suffixes = (".txt", ".text")
    compressible = True
    summary = "plain text: one document per line, or per blank-line block"
    title = "Plain text"
    text = "a line, or a blank-line block (`--text-docs`)"
    fields = "none"
    options = ("text_docs",)

    def scan(self, file: InputFile, options: ReadOptions) -> Scanned:
        records = 0
        saw_text = pending_blank = has_blank_between = leading_blank = False
        for _, line in file.lines(options.invalid_utf8):
            if line.strip():
                records += 1
                if pending_blank and saw_text:
                    has_blank_between = True
                saw_text, pending_blank = True, False
            else:
                pending_blank = True
                leading_blank = leading_blank or not saw_text
        edges = {"blank_between": has_blank_between, "leading_blank": leading_blank,
                 "trailing_blank": saw_text and pending_blank, "any_text": saw_text}
        return Scanned(records, detail={"text_docs": self._mode(options, has_blank_between),
                                        **(edges if file.span is not None else {})})

    @staticmethod
    def _mode(options: ReadOptions, blank_between: bool) -> str:
        if options.text_docs == "auto":
            return "block" if blank_between else "line"
        return options.text_docs

    def combine(self, scans: list[Scanned], options: ReadOptions) -> Scanned:
        """The file's scan from its pieces' (in order): a blank line between two text lines
        anywhere, inside one piece or across pieces, makes blocks (`text_docs` auto)."""
        between = saw_text = pending = False
        for scan in scans:
            d = scan.detail
            if d["any_text"]:
                between = between or d["blank_between"] or (
                    saw_text and (pending or d["leading_blank"]))
                saw_text, pending = True, d["trailing_blank"]
            else:
                pending = pending or d["leading_blank"]
        return Scanned(sum(s.records for s in scans), sum(s.blank for s in scans),
                       detail={"text_docs": self._mode(options, between)})

    def rows(self, file: InputFile, options: ReadOptions) -> Iterator[Row]:
        if file.scanned.detail["text_docs"] == "line":
            for lineno, line in file.lines(options.invalid_utf8):
                if line.strip():
                    yield Row(f"{file.name}:{lineno}", line.strip(), {})
            return
        # a piece leaves a block that began before it to the piece before (the line before it
        # holds text), and reads on past its end to finish its last block
        inside = file.span is not None and any(
            line.strip() for _, line in itertools.islice(spans.lines_before(file), 1))
        block: list[str] = []
        start = 1
        for lineno, line, owned in file.spanned_lines(options.invalid_utf8):
            text = line.strip()
            if not owned and not (block and text):
                break
            if inside:
                inside = bool(text)
                continue
            if text:
                if not block:
                    start = lineno
                block.append(text)
            elif block:
                yield Row(f"{file.name}:{start}", " ".join(block), {})
                block = []
        if block:
            yield Row(f"{file.name}:{start}", " ".join(block), {})
