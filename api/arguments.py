"""The argument types of the Python API: paths, and the forms a task (or text) takes."""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

PathLike = str | os.PathLike
Task = PathLike | Sequence[PathLike] | Sequence[str] | np.ndarray | dict[str, Sequence[PathLike]]


def is_series(value: Any) -> bool:
    """Whether `value` is a pandas Series (without importing pandas)."""
    kind = type(value)
    return kind.__name__ == "Series" and kind.__module__.startswith("pandas")
