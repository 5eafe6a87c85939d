"""`util.ordering.descending_bits`: float32 scores as integer keys in descending order."""

import numpy as np
import pytest

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


def _ranking(values):
    return np.lexsort((np.arange(len(values)), -np.asarray(values, dtype=np.float64)))


@pytest.mark.parametrize("kind", ["ties", "normal", "nan", "specials"])
def test_rank_cut_finds_the_rankings_prefix_and_the_rows_below_it(kind, monkeypatch):
    """`top_rows` = `rank(scores)[:k]` and `rows_below_cut` = the rest of the ranking in row
    order, for ties across blocks, NaN (last), +-0.0 (one score) and infinities; found by
    the bracketed pass or the radix select."""
    from tapt.util import ordering

    rng = np.random.default_rng(["ties", "normal", "nan", "specials"].index(kind))
    for _trial in range(60):
        n = int(rng.integers(0, 400))
        values = (rng.integers(-3, 4, n) if kind == "ties" else rng.standard_normal(n))
        values = values.astype(np.float32)
        if kind == "nan" and n:
            values[rng.integers(0, n, 6)] = np.nan
        if kind == "specials" and n:
            values[rng.integers(0, n, 8)] = rng.choice(
                np.float32([0.0, -0.0, np.inf, -np.inf, 1e-45, -1e-45]), 8)
        monkeypatch.setattr(ordering, "BLOCK", int(rng.integers(1, 64)))
        # the bracketed pass from a sample of a few scores; or none held (the radix select)
        monkeypatch.setattr(ordering, "SAMPLE", int(rng.integers(1, 64)))
        monkeypatch.setattr(ordering, "BAND", int(rng.choice([0, 8, 10**9])))
        before, ranking = values.copy(), _ranking(values)
        for start in sorted({0, n, n // 3, int(rng.integers(0, n + 1))}):
            np.testing.assert_array_equal(ordering.top_rows(values, start), ranking[:start])
            cut = ordering.rank_cut(values, start)
            below = np.sort(ranking[start:])
            np.testing.assert_array_equal(
                ordering.rows_below_cut(values, cut, np.arange(len(below))), below)
            if len(below):
                picks = np.sort(rng.choice(len(below), size=min(len(below), 9), replace=False))
                np.testing.assert_array_equal(ordering.rows_below_cut(values, cut, picks),
                                              below[picks])
                with pytest.raises(ValueError):
                    ordering.rows_below_cut(values, cut, [len(below)])
        np.testing.assert_array_equal(values, before)      # not written


def test_the_bracketed_pass_finds_the_cut_the_radix_select_finds(monkeypatch):
    """On a million scores (a sample of `SAMPLE` of them brackets the position), the cut is
    the radix select's, key and ties, and the bracketed pass answers without it."""
    from tapt.util import ordering

    rng = np.random.default_rng(7)
    values = rng.standard_normal(1 << 20).astype(np.float32)
    values[rng.integers(0, len(values), 5000)] = 0.25          # ties at one score
    starts = [1, 1269, 5076, len(values) // 3, int(np.count_nonzero(values > 0.25)) + 10]
    bracketed = [ordering.rank_cut(values, s) for s in starts]
    monkeypatch.setattr(ordering, "_select_digit", None)     # not reached: no radix select
    assert [ordering.rank_cut(values, s) for s in starts] == bracketed
    monkeypatch.undo()
    monkeypatch.setattr(ordering, "BAND", 0)
    assert [ordering.rank_cut(values, s) for s in starts] == bracketed
    ranking = _ranking(values)
    for start, cut in zip(starts, bracketed):
        top = ordering.top_rows(values, start)
        np.testing.assert_array_equal(top, ranking[:start])
        assert cut.ties == start - int(np.count_nonzero(values > values[ranking[start]]))
