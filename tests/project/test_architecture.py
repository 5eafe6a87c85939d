"""The package's shape: the import rules of pyproject.toml's `[tool.importlinter]` (the layers in
order, no import cycle, function-local imports included) and modules small enough to read in one
sitting. docs/development.md ("Layers") says what the rules are and why."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOT_INSTALLED = {"tests", "benchmarks"}      # folders at the root that are not part of `tapt`
MAX_LINES = 600
TOO_LONG_FOR_NOW: set[str] = set()


def test_import_contracts_hold(capsys: pytest.CaptureFixture[str]) -> None:
    """Every contract of `[tool.importlinter]` (import-linter, a dev dependency) is kept."""
    from importlinter import configuration
    from importlinter.application import use_cases

    configuration.configure()
    kept = use_cases.lint_imports(config_filename=str(ROOT / "pyproject.toml"), cache_dir=None,
                                  no_logo=True)
    report = capsys.readouterr().out
    assert kept, report


def _package_modules() -> list[Path]:
    """The .py files of the package: the root's and those of its subpackages."""
    files = sorted(ROOT.glob("*.py"))
    for folder in sorted(ROOT.iterdir()):
        if (folder / "__init__.py").is_file() and folder.name not in NOT_INSTALLED:
            files += sorted(folder.rglob("*.py"))
    return files


def test_no_module_over_600_lines() -> None:
    """Modules small enough to read in one sitting."""
    long = {}
    for path in _package_modules():
        name = path.relative_to(ROOT).as_posix()
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_LINES and name not in TOO_LONG_FOR_NOW:
            long[name] = lines
    assert not long, f"modules over {MAX_LINES} lines (split them by concept): {long}"


def test_no_module_resolves_a_path_that_can_raise_on_a_loop() -> None:
    """`Path.resolve()` raises RuntimeError on a loop of symbolic links (Python < 3.13): a
    setting such as TAPT_CACHE_DIR pointing into one ended as an internal error. Paths are
    resolved by `tapt.util.files.real_path`, which never raises."""
    calls = {path.relative_to(ROOT).as_posix() for path in _package_modules()
             if ".resolve(" in path.read_text(encoding="utf-8")}
    assert not calls, calls


def test_the_benchmarks_have_one_home() -> None:
    """The benchmarks that ship with tapt are `tapt.bench`, a layer of its own between the API,
    which keeps thin entries to them, and the trainer and retriever they measure; no other
    package holds a benchmark's module."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    top = next(c["layers"] for c in contracts if c["type"] == "layers" and "containers" not in c)
    assert top.index("tapt.api") + 1 == top.index("tapt.bench") == top.index("tapt.trainer") - 1
    assert "tapt.bench" in config["tool"]["setuptools"]["packages"]
    strays = [path.relative_to(ROOT).as_posix() for path in _package_modules()
              if path.parent.name == "bench" or path.stem.startswith(("downstream", "bench"))]
    assert all(name.startswith("bench/") or name in {"api/bench.py", "commands/bench.py",
                                                     "commands/bench_downstream.py"}
               for name in strays), strays
