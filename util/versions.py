"""What produced an artefact: library versions and UTC timestamps recorded in every manifest."""

from __future__ import annotations

import platform
from datetime import datetime, timezone
from importlib import metadata

_LIBRARIES = (
    "tapt", "numpy", "faiss-cpu", "faiss-gpu", "faiss-gpu-cu12", "torch", "transformers",
    "sentence-transformers", "lmdb", "scikit-learn", "pysbd", "onnx", "onnxruntime",
)


def library_versions() -> dict[str, str]:
    """Versions of Python and of the installed libraries that shape an index, selection or model.

    Read from package metadata, so nothing heavy is imported.
    """
    versions = {"python": platform.python_version()}
    for name in _LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def utc_now() -> str:
    """The current time in UTC, ISO 8601 to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
