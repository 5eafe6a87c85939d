"""Append rows to a `.npy` file whose length is not known in advance, and read stored rows
as float32.

The header is written with room to spare and rewritten with the final shape on close, so the
file is a plain `.npy` that `np.load(..., mmap_mode="r")` maps without copying.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np

_HEADER_LEN = 128
_TORCH_CAST_MIN = 1 << 16   # values; below this numpy's own cast is as fast


def as_float32(rows: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """`rows` as a float32 array (the same values: float16 and int8 convert exactly).

    float16 rows are converted by torch when it is installed: numpy's float16 cast runs about
    0.5G values/s on the project's CPUs, torch's is vectorised (over 10x faster). A loop that
    converts block after block should pass `out`: writing into fresh memory costs page faults
    that can exceed the conversion itself.

    Args:
        rows: Any array (a memory map, a gathered block).
        out: A float32 array of the same shape to write into (default: a new one, or `rows`
            itself when it already is float32).

    Returns:
        The float32 rows (`out` when given).
    """
    rows = np.asarray(rows)
    if rows.dtype == np.float16 and rows.size >= _TORCH_CAST_MIN:
        try:
            import torch
        except ImportError:
            pass
        else:
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a read-only memmap: nothing is written to it
                source = torch.from_numpy(rows)
                if out is None:
                    return source.float().numpy()
                torch.from_numpy(out).copy_(source)
                return out
    if out is None:
        return rows.astype(np.float32, copy=False)
    np.copyto(out, rows, casting="unsafe")
    return out


def _header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
    )
    head = buf.getvalue()
    # numpy reserves growth room in the header, so (0, d) and (10**12, d) give the same length.
    if len(head) != _HEADER_LEN:
        raise ValueError(f"shape {shape} does not fit the reserved .npy header")
    return head


class NpyAppender:
    """Stream rows of a fixed trailing shape into `path`; `close()` finalises the header."""

    def __init__(self, path: Path, dtype: np.dtype | type, row_shape: tuple[int, ...] = (),
                 resume_rows: int | None = None) -> None:
        """Start a new file, or (`resume_rows`) keep its first rows and cut off anything after."""
        self.path = path
        self.dtype = np.dtype(dtype)
        self.row_shape = tuple(row_shape)
        self.row_bytes = self.dtype.itemsize * int(np.prod(self.row_shape, dtype=np.int64))
        if resume_rows is None:
            self.rows = 0
            self._fh = open(path, "wb")  # noqa: SIM115 - closed by close()
            self._fh.write(_header(self.dtype, (0, *self.row_shape)))
            return
        committed = _HEADER_LEN + resume_rows * self.row_bytes
        if not path.is_file() or path.stat().st_size < committed:
            raise ValueError(f"{path} is shorter than its {resume_rows} committed rows")
        self.rows = resume_rows
        self._fh = open(path, "r+b")  # noqa: SIM115 - closed by close()
        self._fh.truncate(committed)
        self._fh.seek(committed)

    def append(self, block: np.ndarray) -> None:
        block = np.ascontiguousarray(block, dtype=self.dtype)
        if block.shape[1:] != self.row_shape:
            raise ValueError(f"rows of shape {block.shape[1:]} given, {self.row_shape} expected")
        self._fh.write(block.tobytes())
        self.rows += block.shape[0]

    def sync(self) -> None:
        """Make every appended row durable (the header is only finalised by `close`)."""
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        if self._fh.closed:
            return
        self._fh.seek(0)
        self._fh.write(_header(self.dtype, (self.rows, *self.row_shape)))
        self._fh.close()

    def __enter__(self) -> "NpyAppender":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_WRITE_BLOCK = 1 << 24


def write_npy(fh, array: np.ndarray) -> None:
    """Write `array` as a `.npy` file to an open binary file through Python's `write` (numpy's
    own writer reports a full disk as a short write without errno; this raises ENOSPC)."""
    array = np.ascontiguousarray(array)
    np.lib.format.write_array_header_1_0(fh, np.lib.format.header_data_from_array_1_0(array))
    data = memoryview(array.reshape(-1).view(np.uint8)) if array.size else memoryview(b"")
    for start in range(0, len(data), _WRITE_BLOCK):
        fh.write(data[start:start + _WRITE_BLOCK])
