"""Benchmarks go through the public API: every import of a tapt module by a script in
benchmarks/ is of the public surface, or says why not.

The public surface is `tapt` itself (`import tapt`, and `from tapt import NAME` for a NAME in
`tapt.__all__`) and `tapt.extend` (the extension API). Anything else (`tapt.indexer...`,
`tapt.util...`, `tapt.bench...`, `from tapt import api`) is internal: a script may import it only
where no public call does the job, with a comment saying why that starts `# internal:`, on the
import's own line or above it (a comment above a run of imports, with no blank line between,
covers the run). The number of internal imports is pinned: it may only go down."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PUBLIC_MODULES = {"tapt", "tapt.extend"}
# internal import statements (function-local ones too) in benchmarks/*.py; lower it when a
# script moves to the public API, never raise it
MAX_INTERNAL = 243
_WHY = re.compile(r"#\s*internal:\s*\S")


def _public_names() -> set[str]:
    import tapt

    return {*tapt.__all__, "extend"}


def internal_imports(source: str, public_names: set[str]) -> list[tuple[int, str, bool]]:
    """Each import statement of `source` that reaches a tapt module outside the public surface:
    (its line, the module, whether a `# internal:` comment explains it)."""
    tree = ast.parse(source)
    lines = source.splitlines()
    nodes = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    import_lines = {i for n in nodes for i in range(n.lineno, n.end_lineno + 1)}
    found = []
    for node in nodes:
        if isinstance(node, ast.Import):
            modules = [a.name for a in node.names
                       if a.name.startswith("tapt.") and a.name not in PUBLIC_MODULES]
        elif node.level or not node.module or node.module.split(".")[0] != "tapt":
            modules = []
        elif node.module == "tapt":
            modules = [f"tapt.{a.name}" for a in node.names if a.name not in public_names]
        else:
            modules = [] if node.module in PUBLIC_MODULES else [node.module]
        if not modules:
            continue
        explained = any(_WHY.search(lines[i - 1]) for i in range(node.lineno, node.end_lineno + 1))
        above = node.lineno - 1
        while not explained and above >= 1:
            text = lines[above - 1].strip()
            if text.startswith("#"):
                explained = bool(_WHY.search(text))
            elif above not in import_lines:
                break
            above -= 1
        found.append((node.lineno, modules[0], explained))
    return sorted(found)


def _scripts() -> list[Path]:
    return sorted((ROOT / "benchmarks").glob("*.py"))


def test_every_internal_import_of_a_benchmark_says_why_and_their_number_only_goes_down():
    names = _public_names()
    unexplained, total = [], 0
    for path in _scripts():
        for line, module, explained in internal_imports(path.read_text(encoding="utf-8"), names):
            total += 1
            if not explained:
                unexplained.append(f"benchmarks/{path.name}:{line} {module}")
    assert not unexplained, ("internal imports without a `# internal: why` comment (use the "
                             f"public API where it does the job): {unexplained}")
    assert total <= MAX_INTERNAL, (f"{total} internal imports in benchmarks/, more than the "
                                   f"{MAX_INTERNAL} allowed: use the public API (tapt, tapt.extend)")
    if total < MAX_INTERNAL:
        pytest.fail(f"{total} internal imports now: lower MAX_INTERNAL to {total}")


def test_the_check_flags_an_unexplained_internal_import(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(
        "import tapt\n"
        "from tapt import Index, InputError\n"
        "from tapt.extend import Method\n"
        "from tapt.util.files import atomic_write\n"
        "\n"
        "# internal: the stages timed apart\n"
        "from tapt.indexer.building import stages\n"
        "from tapt.indexer.ann import ann_recall\n"
        "\n"
        "from tapt import api\n"
        "\n"
        "def f():\n"
        "    import tapt.indexer.encoding.encoder  # internal: patched for the run\n"
        "    from tapt.bench.recall import Shared\n")
    found = internal_imports(script.read_text(), _public_names())
    assert found == [(4, "tapt.util.files", False), (7, "tapt.indexer.building", True),
                     (8, "tapt.indexer.ann", True), (10, "tapt.api", False),
                     (13, "tapt.indexer.encoding.encoder", True),
                     (14, "tapt.bench.recall", False)]    # a comment covers the lines below
