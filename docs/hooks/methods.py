"""MkDocs hook: each selection method's facts and parameters, from the method registry.

A page marker `<!-- tapt-method NAME -->` becomes what the registered method says about itself:
its summary, what it needs (task text or embeddings, a budget, how many task sentences) and a
table of its parameters (Python name, command-line option, default, allowed values, help), so
the guide cannot drift from the code. A page that holds any such marker must hold one for
every registered method, and only for registered ones, or a `<!-- tapt-methods-rest -->` marker
where a section (heading and facts) is generated for each registered method the page has no
marker of, so a new method needs no page edit; the strict build fails otherwise.
"""

from __future__ import annotations

import dataclasses
import re
import typing

from mkdocs.exceptions import PluginError

# markers count only on a line of their own: a page may speak of them in prose or code
MARKER = re.compile(r"^<!-- tapt-method ([a-z0-9-]+) -->[ \t]*$", re.M)
REST = "<!-- tapt-methods-rest -->"
_REST = re.compile(rf"^{re.escape(REST)}[ \t]*$", re.M)
BUDGET = {"required": "required", "optional": "optional (without one: {help})", "none": "none"}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _cell(text: str) -> str:
    """Text for a Markdown table cell."""
    return text.replace("|", r"\|")


def method_section(name: str) -> str:
    """Markdown for one registered method: what it needs and its parameters."""
    from tapt.retriever.methods import get_method
    from tapt.retriever.methods.base import param_choices

    method = get_method(name)
    reads = [what for what, needed in (("embeddings", method.needs_embeddings),
                                       ("text", method.needs_text)) if needed]
    facts = [
        f"*{method.summary}*",
        "",
        f"- **Task:** {' and '.join(reads) + ' of the task' if reads else 'none'}"
        + (f"; at least {method.min_task_sentences} sentences"
           if method.min_task_sentences > 1 else ""),
        f"- **Budget:** {BUDGET[method.budget].format(help=method.budget_help)}",
    ]
    extras = [label for label, on in (("a `prerank` for `iforest`", method.can_prerank),
                                      ("a candidate of `auto`", method.auto_candidate)) if on]
    if extras:
        facts.append(f"- **Also:** {' and '.join(extras)}")
    fields = dataclasses.fields(method.Params)
    if not fields:
        return "\n".join(facts + ["", "No parameters of its own.", ""])
    hints = typing.get_type_hints(method.Params)
    rows = ["| parameter | option | default | values | meaning |", "|---|---|---|---|---|"]
    for f in fields:
        choices = param_choices(f, hints[f.name])
        minimum = f.metadata.get("minimum")
        values = (", ".join(f"`{c}`" for c in choices) if choices is not None
                  else f">= {minimum:g}" if minimum is not None else "")
        default = "-" if f.default is None else f"`{f.default}`"
        short = f" / `{f.metadata['short']}`" if f.metadata.get("short") else ""
        rows.append(f"| `{f.name}` | `{_flag(f.name)}`{short} | {default} | {values} | "
                    f"{_cell(f.metadata['help'])} |")
    return "\n".join(facts + ["", *rows, ""])


def on_page_markdown(markdown: str, page, config, files) -> str:
    found = MARKER.findall(markdown)
    if not found:
        return markdown
    from tapt.retriever.methods import method_names

    names = set(method_names())
    unknown = sorted(set(found) - names)
    missing = [n for n in method_names() if n not in found]
    if unknown or (missing and not _REST.search(markdown)):
        raise PluginError(f"{page.file.src_uri}: method markers for unregistered methods "
                          f"{unknown} / registered methods without a marker {missing}")
    rest = "\n".join(f"### `{n}`\n\n{method_section(n)}" for n in missing)
    return MARKER.sub(lambda m: method_section(m.group(1)), _REST.sub(lambda _: rest, markdown))
