"""Sizes written the way people write them (`8G`, `512M`, `1.5GB`), read as bytes."""

from __future__ import annotations

import math
import re

from tapt.errors import InputError

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_MEMORY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_memory(spec: str | int) -> int:
    """`8G`, `512M`, `1.5GB`, `2GiB`, `1048576` -> bytes (binary units); InputError otherwise."""
    if isinstance(spec, int) and not isinstance(spec, bool):
        value, unit = (float(spec) if abs(spec) < 2**1000 else math.inf), ""
    else:
        match = _MEMORY.match(str(spec))
        if not match:
            raise InputError(f"{spec!r}: use a size like 8G, 512M or 1.5G", param="memory")
        value, unit = float(match.group(1)), match.group(2).upper()
    if not math.isfinite(value * _UNITS[unit]):     # more digits than a float holds
        raise InputError(f"{str(spec)[:24]!r}... is too large", param="memory")
    size = int(value * _UNITS[unit])
    if size <= 0:
        raise InputError(f"{spec!r} must be positive", param="memory")
    return size
