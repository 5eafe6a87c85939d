"""MkDocs hook: the command-line reference is the `--help` text of every tapt command.

A page with the marker `<!-- tapt-cli-reference -->` on a line of its own gets, in its place, one
section per command (depth-first, in the order `tapt -h` lists them) holding that command's help
exactly as the terminal prints it, so the reference cannot drift from the code. The marker
written inside a sentence or a code span (a page that speaks of it) is left as it is.
"""

from __future__ import annotations

import re

import click

MARKER = "<!-- tapt-cli-reference -->"
_ALONE = re.compile(rf"^{re.escape(MARKER)}[ \t]*$", re.M)
WIDTH = 100


def _sections(command: click.Command, ctx: click.Context, path: list[str]) -> list[str]:
    title = " ".join(path)
    out = [f"## `{title}`", "", "```text", command.get_help(ctx).rstrip(), "```", ""]
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is None or sub.hidden:
                continue
            sub_ctx = click.Context(sub, info_name=name, parent=ctx, terminal_width=WIDTH,
                                    **{"max_content_width": WIDTH, **sub.context_settings})
            out += _sections(sub, sub_ctx, [*path, name])
    return out


def reference() -> str:
    """Markdown for every command of `tapt`."""
    from tapt.cli import cli

    ctx = click.Context(cli, info_name="tapt", terminal_width=WIDTH,
                        **{"max_content_width": WIDTH, **cli.context_settings})
    return "\n".join(_sections(cli, ctx, ["tapt"]))


def on_page_markdown(markdown: str, page, config, files) -> str:
    if _ALONE.search(markdown):
        return _ALONE.sub(lambda _: reference(), markdown)
    return markdown
