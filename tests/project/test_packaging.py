"""The installed package holds every subpackage: `[tool.setuptools] packages` lists each folder
of the repository that is part of `tapt` (an editable install would hide a missing one; a wheel
would not have it)."""

from __future__ import annotations

from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
NOT_INSTALLED = {".venv", ".git", "tests", "benchmarks", "docs", "site", "build", "data"}


def test_every_subpackage_is_listed_for_installation():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
                 ["packages"])
    found = {"tapt"}
    for init in ROOT.rglob("__init__.py"):
        parts = init.parent.relative_to(ROOT).parts
        if parts and parts[0] not in NOT_INSTALLED and not parts[0].endswith(".egg-info"):
            found.add(".".join(("tapt", *parts)))
    assert found == listed, {"not listed": sorted(found - listed),
                             "listed, no package": sorted(listed - found)}


def test_no_extra_installs_a_second_faiss():
    """The faiss-gpu wheels and faiss-cpu (a core dependency) both write `faiss/`: an extra
    listing faiss-gpu would leave whichever installed last (`tapt[gpu]` relies on torch)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert [d.split(">")[0] for d in project["dependencies"] if d.startswith("faiss")] == \
        ["faiss-cpu"]
    for extra, deps in project["optional-dependencies"].items():
        assert not [d for d in deps if d.lower().startswith("faiss")], extra
