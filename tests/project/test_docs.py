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
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
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
