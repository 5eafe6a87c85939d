"""Reading stored rows: a sharded index's rows taken by id, and rows converted to float32."""

from __future__ import annotations

import numpy as np
import pytest

from tapt.indexer.store.npy import as_float32
from tapt.indexer.store.shards import RowView


def test_rows_taken_from_shards_in_any_order_are_the_rows_of_one_array():
    rng = np.random.default_rng(8)
    whole = rng.standard_normal((1000, 6)).astype(np.float16)
    view = RowView([whole[:300], whole[300:301], whole[301:700], whole[700:]])
    for rows in (np.arange(1000), np.sort(rng.integers(0, 1000, 400)),   # ascending, repeats
                 rng.integers(0, 1000, 400), np.array([999, 0, 300, 300]), np.array([5]),
                 np.array([], dtype=np.int64), np.array([-1, -1000])):
        np.testing.assert_array_equal(view.take(rows), whole[rows])
    with pytest.raises(IndexError):
        view.take(np.array([0, 1000]))


@pytest.mark.parametrize("dtype", [np.float16, np.int8, np.float32, np.float64])
@pytest.mark.parametrize("n", [10, 100_000])
def test_float32_rows_hold_the_same_values(dtype, n):
    rng = np.random.default_rng(9)
    rows = (rng.standard_normal((n, 4)) * 50).astype(dtype)
    want = rows.astype(np.float32)
    np.testing.assert_array_equal(as_float32(rows), want)
    out = np.full(rows.shape, np.nan, dtype=np.float32)
    assert as_float32(rows, out=out) is out
    np.testing.assert_array_equal(out, want)
