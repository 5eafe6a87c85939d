"""tapt: choose continued-pretraining data for a task from a corpus embedded once.

    import tapt
    ix = tapt.Index.open("idx")
    sel = ix.select("fused", task=["a task sentence", "another one"], budget="500sent")
    sel.to_pandas().head()

See `tapt.api` for the whole API. `import tapt` is cheap: the names below load on first use.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from tapt.util.machine import torch_single_threaded

os.register_at_fork(after_in_child=torch_single_threaded)

_LAZY = {
    "Index": "tapt.api",
    "Selection": "tapt.api",
    "ServedIndex": "tapt.api",
    "serve": "tapt.api",
    "train": "tapt.api",
    "pretrain": "tapt.api",
    "model_path": "tapt.api",
    "evaluate_mlm": "tapt.api",
    "evaluate": "tapt.api",
    "export": "tapt.api",
    "show": "tapt.api",
    "plot_scores": "tapt.api",
    "HTTPServer": "tapt.api",
    "bench_recall": "tapt.api",
    "bench_downstream": "tapt.api",
    "method_names": "tapt.api",
    "describe_methods": "tapt.api",
    "TaptError": "tapt.errors",
    "InputError": "tapt.errors",
    "OutputError": "tapt.errors",
    "IndexFormatError": "tapt.errors",
    "ModelMismatchError": "tapt.errors",
    "BudgetError": "tapt.errors",
    "StorageError": "tapt.errors",
    "Interrupted": "tapt.errors",
    "TrainingInterrupted": "tapt.errors",
}

__all__ = ["__version__", *_LAZY]


def _version() -> str:
    # looked up on first use: importlib.metadata costs ~35 ms, and the command line installs
    # its signal handlers only once this package is imported
    from importlib import metadata

    try:
        return metadata.version("tapt")
    except metadata.PackageNotFoundError:  # pragma: no cover - an uninstalled tree
        return "0+unknown"


def __getattr__(name: str) -> Any:
    if name == "__version__":
        value = globals()["__version__"] = _version()
        return value
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tapt' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public API only: `__all__` (subpackages and helpers stay importable, not listed)."""
    return sorted(__all__)
