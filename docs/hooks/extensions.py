"""MkDocs hook: the tables of registered extensions, from their registries.

`<!-- tapt-formats -->` on a line of its own becomes the table of corpus formats (one row per
registered format, in listing order: its `title`, suffixes or `source`, whether compressed files
are read, where the text is, what other fields become and the options only it reads,
`Format.options`), and `<!-- tapt-executor-options -->`
the table of the executors' options (`Executor.Options`: flag, executor, help), so that a new
format or executor needs no page edit.
"""

from __future__ import annotations

import re

FORMATS = "<!-- tapt-formats -->"
EXECUTOR_OPTIONS = "<!-- tapt-executor-options -->"


def _alone(marker: str) -> re.Pattern:
    return re.compile(rf"^{re.escape(marker)}[ \t]*$", re.M)


def _cell(text: str) -> str:
    return text.replace("|", r"\|")


def _flag(desc: dict) -> str:
    """An option as `--flag VALUE` (`config_fields`' description of it)."""
    metavar = desc["metavar"] or {int: "N", float: "F"}.get(desc["kind"], "")
    if desc["choices"]:
        metavar = "|".join(desc["choices"])
    return desc["flag"] + (f" {metavar}" if metavar else "")


def formats_table() -> str:
    """Markdown: one row per registered corpus format."""
    from tapt.api.options import format_fields
    from tapt.indexer.reading import formats

    options = {desc["name"]: _flag(desc) for desc in format_fields()}
    rows = ["| Format | Extensions | Compressed | Text | Other fields | Options |",
            "| --- | --- | --- | --- | --- | --- |"]
    for fmt in formats.FORMATS:
        where = ", ".join(f"`{suffix}`" for suffix in fmt.suffixes) or fmt.source or "-"
        cells = [fmt.title or fmt.name, where, "yes" if fmt.compressible else fmt.packed,
                 fmt.text or fmt.summary, fmt.fields,
                 ", ".join(f"`{options[name]}`" for name in fmt.options) or "-"]
        rows.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(rows)


def executor_options_table() -> str:
    """Markdown: one row per option of a registered executor."""
    from tapt.api.options import executor_fields

    rows = ["| option | with `--executor` | meaning |", "|---|---|---|"]
    for desc in executor_fields():
        meaning = desc["help"].removeprefix(f"--executor {desc['executor']}: ")
        rows.append(f"| `{_cell(_flag(desc))}` | {desc['executor']} | {_cell(meaning)} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, page, config, files) -> str:
    for marker, table in ((FORMATS, formats_table), (EXECUTOR_OPTIONS, executor_options_table)):
        pattern = _alone(marker)
        if pattern.search(markdown):
            markdown = pattern.sub(lambda _: table(), markdown)
    return markdown
