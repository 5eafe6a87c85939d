"""tapt: choose continued-pretraining data for a task from a corpus embedded once."""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("tapt")
except _metadata.PackageNotFoundError:  # pragma: no cover - running from an uninstalled tree
    __version__ = "0+unknown"
