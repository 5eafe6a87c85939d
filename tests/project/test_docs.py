"""The documentation: the site builds without a warning (mkdocs --strict), the CLI reference
and the method sections are generated, and the README stays a user's page that matches the
code (its methods table lists every registered method; its links resolve)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from readme import README, readme_section

REPO = Path(__file__).resolve().parents[2]


def test_docs_build_strictly(tmp_path):
    """From another working directory (`-f path/mkdocs.yml`): nothing may depend on it."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(REPO / "mkdocs.yml"),
         "--site-dir", str(tmp_path / "site")],
        cwd=elsewhere, capture_output=True, text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    site = tmp_path / "site"
    page = (site / "reference" / "cli" / "index.html").read_text()
    assert "tapt index build" in page and "Usage: tapt select centroid" in page
    selecting = (site / "guide" / "selecting" / "index.html").read_text()
    assert "tapt-method" not in selecting and "--ef-search" in selecting
    api = (site / "reference" / "api" / "index.html").read_text()
    for name in ("tapt.api.Index.select", "tapt.api.train", "tapt.api.evaluate_mlm",
                 "tapt.retriever.selections.selection.Selection.export", "tapt.errors.TaptError",
                 "tapt.retriever.methods.registry.register"):
        assert f'id="{name}"' in api, name
    assert (site / "benchmarks" / "results" / "seeds-2000" / "pr-medical.png").is_file()
    assert not (site / "hooks").exists()
    # a page that speaks of a marker keeps its words: the reference lands only where the
    # marker stands on a line of its own
    development = (site / "development" / "index.html").read_text()
    assert "Usage: tapt" not in development and "tapt-cli-reference" in development


def test_readme_methods_table_is_the_registry():
    from tapt.retriever.methods import method_names

    rows = re.findall(r"^\| `([a-z0-9-]+)` \|", readme_section("methods"), re.M)
    # registered methods in registry order; a new one may wait for a row (the guide has it)
    assert rows and rows == [n for n in method_names() if n in rows]


def test_selecting_guide_has_a_section_per_method():
    from tapt.retriever.methods import method_names

    guide = (REPO / "docs" / "guide" / "selecting.md").read_text(encoding="utf-8")
    found = re.findall(r"<!-- tapt-method ([a-z0-9-]+) -->", guide)
    # hand-written sections in registry order; the hook generates the rest's at this marker
    assert found == [n for n in method_names() if n in found]
    assert "<!-- tapt-methods-rest -->" in guide


def test_readme_is_a_users_page():
    assert len(README.splitlines()) <= 250
    assert "make demo" in README and "make test" in README
    targets = re.findall(r"^([a-z-]+):", (REPO / "Makefile").read_text(), re.M)
    assert {"demo", "test", "docs"} <= set(targets)
    assert "../" not in README and "/work/" not in README
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README):
        if "://" not in target:
            assert (REPO / target).exists(), f"README links to {target}, which does not exist"


def test_readme_walkthrough_steps_leave_each_others_files_alone():
    """The Python block, pasted after the command-line block, writes none of the files the
    command line wrote (its sel.jsonl would have been replaced, and the command line's
    `tapt train ... --resume` refused), and trains a short run when pasted, not a GPU's."""
    cli = README.split("## From the command line", 1)[1].split("```sh\n", 1)[1].split("```")[0]
    python = readme_section("python").split("```python\n", 1)[1].split("```")[0]
    cli_out = set(re.findall(r"--out (\S+)", cli))
    python_out = set(re.findall(r'\.(?:write|export)\("([^"]+)"\)', python))
    python_out |= set(re.findall(r'tapt\.train\("[^"]+", "([^"]+)"', python))
    assert cli_out and len(python_out) == 3, (cli_out, python_out)
    assert not cli_out & python_out, cli_out & python_out
    steps = [int(n) for n in re.findall(r"steps=(\d+)", python)]
    assert steps and max(steps) <= 50, steps


def test_readme_times_name_the_machine_they_were_measured_on():
    """Every time the README quotes is said for a named machine and load, as measured by
    benchmarks/readme_walkthrough.py."""
    for match in re.finditer(r"\b(\d+(?:\.\d+)?) ?(s|min|minutes|seconds)\b(?! a step)",
                             README):
        around = README[max(0, match.start() - 400):match.end() + 400]
        assert "load" in around and "core" in around, around
    assert "a few minutes on a CPU" not in README and "half an hour" not in README


def test_no_page_speaks_of_how_the_project_was_made():
    """The site's pages, and the results files they include, speak to a user: no issue of the
    project's tracker, no folder outside the repository of the machine they were written on
    (a variable such as $WORK stands for one of yours)."""
    pages = sorted((REPO / "docs").rglob("*.md"))
    included = {m.group(1) for page in pages for m in re.finditer(
        r'^--8<-- "([^":]+)', page.read_text(encoding="utf-8"), re.M)}
    made = re.compile(r"the issue\b|\bissues? \d+|issue's|\(issue|/work/|/tmp/|/root/|"
                      r"\.\./shared|benchcache", re.I)
    found = []
    for path in [*pages, *(REPO / name for name in sorted(included))]:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if made.search(line):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()[:100]}")
    assert not found, "\n".join(found)
