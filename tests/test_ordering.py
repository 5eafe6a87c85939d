"""`util.ordering.descending_bits`: float32 scores as integer keys in descending order."""

import numpy as np

from tapt.util.ordering import descending_bits


def test_keys_sort_like_negated_floats_with_signed_zero_tied():
    rng = np.random.default_rng(0)
    values = np.concatenate([
        rng.standard_normal(5000).astype(np.float32),
        np.array([np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 3.4e38, -3.4e38], np.float32)])
    keys = descending_bits(values)
    assert keys.dtype == np.uint32
    by_key = np.argsort(keys, kind="stable")
    by_value = np.lexsort((np.arange(len(values)), -values.astype(np.float64)))
    np.testing.assert_array_equal(by_key, by_value)
    assert descending_bits(np.float32([0.0]))[0] == descending_bits(np.float32([-0.0]))[0]


def test_out_is_written_and_input_kept():
    values = np.float32([[1.0, -2.0], [0.5, -0.0]])
    before = values.copy()
    out = np.zeros(values.shape, dtype=np.uint32)
    assert descending_bits(values, out=out) is out
    np.testing.assert_array_equal(values, before)
    np.testing.assert_array_equal(np.argsort(out.ravel()), [0, 2, 3, 1])


def test_values_come_back_from_their_keys():
    from tapt.util.ordering import descending_values

    values = np.float32([np.inf, 2.5, 1e-45, 0.0, -0.0, -1e-45, -3.0, -np.inf])
    back = descending_values(descending_bits(values))
    np.testing.assert_array_equal(back, values)
    assert not np.signbit(back[4])          # -0.0 returns as +0.0
