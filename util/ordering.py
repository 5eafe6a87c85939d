"""Sort keys for scores: float32 values as unsigned integers that sort in the opposite order, so
a ranking with its tie-break packs into one 64-bit integer sort instead of a two-key `lexsort`."""

from __future__ import annotations

import numpy as np

__all__ = ["descending_bits", "descending_values"]


def descending_bits(values: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Order-preserving uint32 keys of float32 `values`: a higher value gets a lower key, and
    -0.0 and +0.0 one key (they are equal scores). NaN has no place in this order: callers
    check for it.

    Args:
        values: float32 array of any shape (not written).
        out: uint32 array of the same shape to write the keys into (default: a new one).

    Returns:
        The keys (`out` when given).
    """
    neg = np.negative(values, dtype=np.float32)
    neg += np.float32(0.0)                    # -0.0 -> +0.0
    bits = neg.view(np.int32)
    # IEEE order as unsigned order: negatives flip every bit, positives set the sign bit
    mask = bits >> 31                         # arithmetic: -1 for negatives, 0 otherwise
    mask |= np.int32(-0x80000000)
    if out is None:
        out = np.empty(values.shape, dtype=np.uint32)
    np.bitwise_xor(bits, mask, out=out.view(np.int32))
    return out


def descending_values(keys: np.ndarray) -> np.ndarray:
    """The float32 values of `descending_bits` keys (-0.0 comes back as +0.0).

    Args:
        keys: uint32 keys (or the high halves of packed keys, cast to uint32).

    Returns:
        float32 values.
    """
    keys = np.asarray(keys, dtype=np.uint32)
    bits = np.where(keys >> 31, keys ^ np.uint32(0x80000000), ~keys)
    return np.subtract(np.float32(0), bits.view(np.float32))   # +0.0, never -0.0
