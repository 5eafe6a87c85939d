"""The documentation site builds without a warning (mkdocs --strict), CLI reference included."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def test_docs_build_strictly(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    page = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text()
    assert "tapt index build" in page and "Usage: tapt select centroid" in page
