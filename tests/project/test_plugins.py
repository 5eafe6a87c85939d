"""A user's own extensions reach the `tapt` command as plugins: a distribution's entry point
of the group `tapt.plugins`, or a module named in TAPT_PLUGINS; a plugin that fails to import
ends the command with one Error line naming it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from test_extend import example

REPO = Path(__file__).resolve().parents[2]


def _tapt(args: list[str], path: Path, **env: str) -> subprocess.CompletedProcess:
    """The `tapt` command in a fresh process, `path` on its module search path."""
    environ = {key: value for key, value in os.environ.items() if key != "TAPT_PLUGINS"}
    environ.update(PYTHONPATH=os.pathsep.join([str(path), environ.get("PYTHONPATH", "")]),
                   **env)
    return subprocess.run([sys.executable, "-c", "from tapt.cli import main; main()", *args],
                          capture_output=True, text=True, env=environ, timeout=120)


def test_an_installed_distributions_entry_point_adds_its_format(tmp_path):
    (tmp_path / "notes_format.py").write_text(example("format"), encoding="utf-8")
    info = tmp_path / "tapt_notes-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tapt-notes\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[tapt.plugins]\nnotes = notes_format\n")
    result = _tapt(["index", "build", "--help"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "markdown" in result.stdout.split("--input-format", 1)[1].split("--", 1)[0]
    assert "markdown" not in _tapt(["index", "build", "--help"], REPO / "tests").stdout


def test_a_module_named_in_tapt_plugins_adds_its_method(tmp_path):
    (tmp_path / "my_nearest.py").write_text(example("method"), encoding="utf-8")
    result = _tapt(["select", "nearest", "--help"], tmp_path, TAPT_PLUGINS="my_nearest")
    assert result.returncode == 0, result.stderr
    assert "Best cosine to any task sentence." in result.stdout and "--floor" in result.stdout


def test_a_plugin_that_fails_to_import_is_one_error_line_naming_it(tmp_path):
    (tmp_path / "broken_plugin.py").write_text("raise RuntimeError('no licence key')\n")
    (tmp_path / "my_nearest.py").write_text(example("method"), encoding="utf-8")
    result = _tapt(["select", "--help"], tmp_path, TAPT_PLUGINS="my_nearest, broken_plugin")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "Error: plugin broken_plugin (TAPT_PLUGINS) failed to import: RuntimeError: no "
        "licence key"]
    missing = _tapt(["index", "info", "x"], tmp_path, TAPT_PLUGINS="not_there")
    assert missing.returncode == 1 and missing.stderr.startswith(
        "Error: plugin not_there (TAPT_PLUGINS) failed to import: ModuleNotFoundError")
    assert len(missing.stderr.splitlines()) == 1
