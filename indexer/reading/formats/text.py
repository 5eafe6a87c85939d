"""Plain text (.txt, .text), optionally compressed: one document per line, or per blank-line
block (`text_docs`; auto: blocks when a blank line separates two text lines)."""

from __future__ import annotations

from typing import Iterator

from .base import Format, InputFile, ReadOptions, Row, Scanned, register


@register
class TextFormat(Format):
    name = "text"
    suffixes = (".txt", ".text")
    compressible = True
    summary = "plain text: one document per line, or per blank-line block"

    def scan(self, file: InputFile, options: ReadOptions) -> Scanned:
        records = 0
        saw_text = pending_blank = has_blank_between = False
        for _, line in file.lines(options.invalid_utf8):
            if line.strip():
                records += 1
                if pending_blank and saw_text:
                    has_blank_between = True
                saw_text, pending_blank = True, False
            else:
                pending_blank = True
        if options.text_docs == "auto":
            mode = "block" if has_blank_between else "line"
        else:
            mode = options.text_docs
        return Scanned(records, detail={"text_docs": mode})

    def rows(self, file: InputFile, options: ReadOptions) -> Iterator[Row]:
        if file.scanned.detail["text_docs"] == "line":
            for lineno, line in file.lines(options.invalid_utf8):
                if line.strip():
                    yield Row(f"{file.name}:{lineno}", line.strip(), {})
            return
        block: list[str] = []
        start = 1
        for lineno, line in file.lines(options.invalid_utf8):
            if line.strip():
                if not block:
                    start = lineno
                block.append(line.strip())
            elif block:
                yield Row(f"{file.name}:{start}", " ".join(block), {})
                block = []
        if block:
            yield Row(f"{file.name}:{start}", " ".join(block), {})
