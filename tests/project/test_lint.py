"""Lint and import order: `ruff check` with the rules of pyproject.toml's `[tool.ruff]` (pyflakes,
the bugbear and blind-except rules the code's `noqa` comments name, sorted imports, and tapt's own
modules imported one way, absolutely: `from tapt.x import y`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _ruff(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache",
                           "--output-format", "concise", *args], cwd=ROOT, input=stdin,
                          capture_output=True, text=True, timeout=300)


def test_ruff_finds_nothing() -> None:
    """The whole tree (package, tests, benchmarks) passes `ruff check`."""
    done = _ruff(".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_refuses_a_relative_import_and_unsorted_imports() -> None:
    """The configuration is the one in force: a module of the package with a relative import
    and an unsorted block fails."""
    source = "import sys\nimport os\n\nfrom .files import real_path\n\nprint(os, sys, real_path)\n"
    done = _ruff("--stdin-filename", "util/probe.py", "-", stdin=source)
    assert done.returncode == 1
    assert "TID252" in done.stdout and "I001" in done.stdout, done.stdout
