"""Helpers the benchmarks share: the peak of what a call allocates, and a module of this
repository as it was at an earlier revision (for before / after comparisons in one process)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent


def traced(fn: Callable[[], Any]) -> tuple[Any, int, float]:
    """`fn()`, the peak of what it allocated (bytes, `tracemalloc`: numpy's allocations
    included) and its seconds."""
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1], time.perf_counter() - t0
    finally:
        tracemalloc.stop()


def module_at(rev: str, rel: str, name: str):
    """The file `rel` of this repository at git revision `rev`, loaded as module `name`.

    Args:
        rev: A git revision ("8b8cc4a^").
        rel: The file's path in the repository ("retriever/ranking/document_pooling.py").
        name: The module's name (registered in `sys.modules`).

    Returns:
        The module.
    """
    source = subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:{rel}"],
                            capture_output=True, text=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module          # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def write_report(out: Path | None, stem: str, report: dict[str, Any], text: str) -> None:
    """Print a benchmark's markdown and, with `out`, write `out/STEM.json` (the report) and
    `out/STEM.md` (the markdown), each under a temporary name then renamed."""
    # internal: the benchmarks' reports written as tapt writes its files (temporary name, rename)
    from tapt.util.files import atomic_write, write_json_atomic

    print(text)
    if out is None:
        return
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / f"{stem}.json", report)
    with atomic_write(out / f"{stem}.md") as fh:
        fh.write(text)
