"""The user cache directory shared by tapt's caches (task embeddings, exported ONNX models)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path | None:
    """`$TAPT_CACHE_DIR`, else `$XDG_CACHE_HOME/tapt` or `~/.cache/tapt`; None when set to `off`."""
    raw = os.environ.get("TAPT_CACHE_DIR")
    if raw is not None:
        return None if raw.strip().lower() in ("", "off", "0", "none") else Path(raw)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "tapt"
