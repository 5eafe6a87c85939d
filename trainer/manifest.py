"""The training manifest, the run identity checked on --resume, and atomic JSON writes."""

from __future__ import annotations

import hashlib
import json
import os
import platform
from pathlib import Path
from typing import Any

TRAINING_MANIFEST = "training_manifest.json"
TRAINING_FORMAT = "tapt-training"
TRAINING_FORMAT_VERSION = 1


def library_versions() -> dict[str, str]:
    """Versions of python and the libraries that determine a run's numbers."""
    import numpy
    import torch
    import transformers

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "numpy": numpy.__version__,
    }


def write_json_atomic(path: str | Path, obj: Any) -> None:
    """Write JSON to a temporary name in the same directory, then rename it into place."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def identity_hash(identity: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of a run identity."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def identity_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Human-readable 'key: old -> new' for each field that differs."""
    diffs = []
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            a, b = json.dumps(old.get(key)), json.dumps(new.get(key))
            if len(a) > 60 or len(b) > 60:
                diffs.append(f"{key} differs")
            else:
                diffs.append(f"{key}: {a} -> {b}")
    return diffs
